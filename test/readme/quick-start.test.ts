/*
 * The README's quick start, run as printed (curl, under dash, a POSIX sh, and under bash)
 * against the service started with no configuration, as `npm start` does: it verifies a code,
 * can be run again and again under the default limits, reads the inbox of an address with a
 * `+` (as docs/examples.md uses), and stops with a clear message when a step fails.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { startServer } from '../support/service-process.js'
import { execForTest as run } from '../support/processes.js'

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
const quickStart = readme.slice(readme.indexOf('In a second terminal, ask for a code'), readme.indexOf('Run the second step again'))
const blocks = [...quickStart.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1] ?? '')

const DEFAULT_LIMITS = { RATE_LIMIT_RECIPIENT: '5/15m', RATE_LIMIT_SOURCE: '30/1m', RATE_LIMIT_KEY: '600/1m', RATE_LIMIT_MAILBOX: '15/15m', RATE_LIMIT_ACCOUNT: '60/1m', RATE_LIMIT_PUBLIC: '120/1m' }

async function snippet (base: string, edit: (script: string) => string = (script) => script, shell = 'dash'): Promise<{ stdout: string, stderr: string }> {
  const script = edit(blocks.join('\n')).replaceAll('http://127.0.0.1:3000', base)
  return await run(shell, ['-c', script], { timeout: 30_000 })
}

t.test('the quick start, as printed', async (t) => {
  t.equal(blocks.length, 2, 'two shell steps')
  const server = await startServer(t, { LOG_LEVEL: 'warn', ...DEFAULT_LIMITS })

  t.test('verifies a code, run after run, under the default limits', async (t) => {
    for (let i = 0; i < 7; i++) {
      const shell = i % 2 === 0 ? 'dash' : 'bash'
      const { stdout, stderr } = await snippet(server.base, undefined, shell)
      t.match(stdout, /^sent: otp_[A-Za-z0-9_-]+\n\{"success":true,"message":"Code verified","data":\{"receipt":"eyJ/, `run ${i + 1} (${shell})`)
      t.equal(stderr, '')
    }
  })

  t.test('an address with a + (docs/examples.md\'s) is read back from the inbox', async (t) => {
    const { stdout, stderr } = await snippet(server.base, (script) => script.replace(/^EMAIL=.*$/m, () => 'EMAIL="you+$(date +%s).$$@example.com"'))
    t.match(stdout, /^sent: otp_[A-Za-z0-9_-]+\n\{"success":true,"message":"Code verified"/)
    t.equal(stderr, '')
  })

  t.test('an error answer is reported, not passed on as a requestId', async (t) => {
    const { stdout, stderr } = await snippet(server.base, (script) => script.replace(/^KEY=.*$/m, 'KEY=sk_test_NotAKey'))
    t.equal(stdout, '')
    t.match(stderr, /^dispatch failed: \{"success":false,"message":"[^"]+","code":"UNAUTHORIZED"\}\nno message for this dispatch: run the first step again\n$/)
  })

  t.test('a service that is not running is named as the likely cause', async (t) => {
    const { stderr } = await snippet('http://127.0.0.1:9')
    t.match(stderr, /^dispatch failed: no answer \(is npm start running\?\)\n/)
  })
})
