import { parseArgs, type ParseArgsConfig } from 'node:util'

/** Where a command writes: `out` its results (stdout), `note` what a person reads besides them (stderr). */
export interface Io {
  out: (line: string) => void
  note: (line: string) => void
  env: Readonly<Record<string, string | undefined>>
}

/** A command line the program cannot run: one line says what is wrong; --help shows the rest. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

/** A command that ran and failed: its message says why, for a person. */
export class CommandError extends Error {
  override readonly name = 'CommandError'
}

type Options = NonNullable<ParseArgsConfig['options']>

/** node's parseArgs, with --help on every command and its refusals as UsageError. */
export function parse<T extends Options> (argv: string[], options: T): { positionals: string[], values: Record<string, string | boolean | string[] | boolean[] | undefined> } {
  try {
    return parseArgs({ args: argv, allowPositionals: true, strict: true, options: { ...options, help: { type: 'boolean', short: 'h' } } })
  } catch (error) {
    // parseArgs appends advice on positionals that start with '-'; the first sentence is the news.
    throw new UsageError((error as Error).message.replace(/\. To specify a positional argument[\s\S]*$/, ''))
  }
}

/** A string option, or undefined; parseArgs has already refused a value of the wrong kind. */
export function text (values: Record<string, unknown>, name: string): string | undefined {
  const value = values[name]
  return typeof value === 'string' ? value : undefined
}

/** A string option the command cannot go without. */
export function required (values: Record<string, unknown>, name: string): string {
  const value = text(values, name)
  if (value === undefined || value === '') throw new UsageError(`--${name} is required`)
  return value
}

/** The help of the deepest topic named (`dead-letters list`, then `dead-letters`), else the command's. */
export function helpFor (help: Readonly<Record<string, string>>, positionals: readonly string[]): string {
  for (let length = positionals.length; length > 0; length--) {
    const topic = help[positionals.slice(0, length).join(' ')]
    if (topic !== undefined) return topic
  }
  return help[''] ?? ''
}

/** An environment variable, empty meaning unset (as the service reads it). */
export function envValue (env: Io['env'], name: string): string | undefined {
  const value = env[name]
  return value === undefined || value === '' ? undefined : value
}

/**
 * Reports a failed command in one line on stderr (never a stack or a log line) and gives the
 * exit code: 2 for a command line the program cannot run, 1 for a command that failed.
 */
export function report (program: string, error: unknown, note: (line: string) => void): number {
  const message = error instanceof Error ? error.message : String(error)
  if (error instanceof UsageError) {
    note(`${program}: ${message} (${program} --help shows the usage)`)
    return 2
  }
  note(`${program}: ${message}`)
  return 1
}
