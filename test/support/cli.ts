import { run } from '../../cli/email-otp.js'

export interface CliOutput { stdout: string, stderr: string }
export type CliFailure = Error & CliOutput & { code: number }

/**
 * Runs `email-otp <argv>` in this process, as cli/main.ts runs it: what the command writes to
 * stdout and stderr, line by line, and its exit code. Spawning npm, node and tsx for every case
 * took seconds each on a busy 2-core machine; a test keeps one run through `npm run` as its
 * user types it. Settles as execFile does: resolves on exit code 0, else rejects with the code
 * and the output.
 */
export async function runCli (argv: string[], env: Readonly<Record<string, string | undefined>>): Promise<CliOutput> {
  let stdout = ''
  let stderr = ''
  const code = await run(argv, {
    out: (line) => { stdout += line + '\n' },
    note: (line) => { stderr += line + '\n' },
    env
  })
  if (code === 0) return { stdout, stderr }
  const failure: CliFailure = Object.assign(new Error(`email-otp ${argv.join(' ')} exited with ${code}`), { code, stdout, stderr })
  throw failure
}
