import { report, type Io } from './program.js'

interface Command {
  summary: string
  load: () => Promise<{ run: (argv: string[], io: Io) => Promise<void> }>
}

const commands: Record<string, Command> = {
  keys: { summary: 'create, revoke and list the API keys of the tenants file', load: async () => await import('./keys.js') },
  templates: { summary: 'preview a tenant\'s message, check every template of the tenants file', load: async () => await import('./templates.js') },
  tenants: { summary: 'check the tenants file (every problem at once), print its JSON Schema', load: async () => await import('./tenants.js') },
  webhooks: { summary: 'list and replay dead letters, print the payloads\' JSON Schema', load: async () => await import('./webhooks.js') }
}

const usage = `Usage:
  email-otp <command> [arguments]
  email-otp <command> --help

Commands:
${Object.entries(commands).map(([name, { summary }]) => `  ${name.padEnd(10)} ${summary}`).join('\n')}

In a checkout, without a build: npm run <command> -- [arguments] (e.g. npm run keys -- --help).
After npm run build (and in the container image): npx email-otp <command> [arguments].`

/** Runs `email-otp <command> …` and answers the exit code. */
export async function run (argv: string[], io: Io): Promise<number> {
  const [name, ...rest] = argv
  if (name === '--help' || name === '-h' || name === 'help') {
    io.out(usage)
    return 0
  }
  if (name === undefined || !Object.hasOwn(commands, name)) {
    io.note(`email-otp: ${name === undefined ? 'a command is required' : `unknown command ${name}`} (email-otp --help lists them)`)
    return 2
  }
  try {
    await (await commands[name]!.load()).run(rest, io)
    return 0
  } catch (error) {
    return report(`email-otp ${name}`, error, io.note)
  }
}
