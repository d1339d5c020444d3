import { redisFailure, redisForTool } from './redis-tool.js'
import { openRedisWebhookQueue } from '../lib/state/index.js'
import { TENANT_ID_PATTERN } from '../schemas/tenants.js'
import { WebhookPayloadsDocument } from '../schemas/webhooks.js'
import { CommandError, helpFor, parse, text, UsageError, type Io } from './program.js'

const listUsage = '  email-otp webhooks dead-letters list [--tenant ID] [--limit N]'
const replayUsage = `  email-otp webhooks dead-letters replay --id ID [--id ID]...
  email-otp webhooks dead-letters replay --all [--tenant ID]`
const schemaUsage = '  email-otp webhooks schema'

const deadLettersHelp = `dead-letters works on the queues in the Redis the service uses (REDIS_URL, REDIS_SENTINELS or
REDIS_CLUSTER_NODES, with REDIS_USERNAME, REDIS_PASSWORD and REDIS_TLS, as for the service).
Each tenant has its own dead letters: its newest WEBHOOK_MAX_QUEUED_PER_TENANT (10000).
list prints one JSON line per dead letter, newest first, every tenant's unless --tenant
(reason: failed, its attempts failed for WEBHOOK_RETRY_FOR; overflow, its tenant's queue was
full). replay queues them again: same webhook-id, a new retry period; they leave the list.
A tenant's letters are replayed only while its queue is below WEBHOOK_MAX_QUEUED_PER_TENANT.
An id is <tenant>/<id>, as list prints it.`

const help: Record<string, string> = {
  '': `Usage:
${listUsage}
${replayUsage}
${schemaUsage}
  email-otp webhooks [COMMAND] --help

${deadLettersHelp}
schema prints the JSON Schema of the webhook payloads (schemas/webhooks.schema.json).`,
  'dead-letters': `Usage:\n${listUsage}\n${replayUsage}\n\n${deadLettersHelp}`,
  'dead-letters list': `Usage:\n${listUsage}\n\nOne JSON line per dead letter, newest first (--limit: 1 to 10000, 100 by default); every\ntenant's unless --tenant. Says so on stderr when there are none.`,
  'dead-letters replay': `Usage:\n${replayUsage}\n\nQueues dead letters again (same webhook-id, a new retry period): those named by --id, or all\nof them (of one tenant with --tenant). Fails, naming them, for ids that name no dead letter\nand for letters left because their tenant's queue is full (WEBHOOK_MAX_QUEUED_PER_TENANT).`,
  schema: `Usage:\n${schemaUsage}\n\nPrints the JSON Schema of every webhook payload, as published in schemas/webhooks.schema.json.`
}

/** The JSON Schema document of every webhook body, as published in schemas/webhooks.schema.json. */
export function webhooksJsonSchema (): string {
  return JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...WebhookPayloadsDocument }, null, 2) + '\n'
}

const plural = (count: number, noun: string): string => `${count} ${noun}${count === 1 ? '' : 's'}`

/**
 * Runs one command: `out` gets the results (stdout), `note` what a person reads besides them
 * (stderr). Throws UsageError for a command line it cannot run and CommandError for a command
 * that failed, each with one line to show.
 */
export async function run (argv: string[], { out, note, env }: Io): Promise<void> {
  const { positionals, values } = parse(argv, { limit: { type: 'string' }, all: { type: 'boolean' }, id: { type: 'string', multiple: true }, tenant: { type: 'string' } })
  const [command, action, extra] = positionals
  if (values.help === true || command === 'help') {
    out(helpFor(help, positionals))
    return
  }
  if (command === undefined) throw new UsageError('a command is required: dead-letters or schema')
  if (command === 'schema') {
    if (action !== undefined) throw new UsageError(`unexpected argument ${action}`)
    out(webhooksJsonSchema().trimEnd())
    return
  }
  if (command !== 'dead-letters') throw new UsageError(`unknown command ${command}`)
  if (action !== 'list' && action !== 'replay') throw new UsageError(action === undefined ? 'dead-letters needs list or replay' : `unknown command dead-letters ${action}`)
  if (extra !== undefined) throw new UsageError(`unexpected argument ${extra}`)
  const tenant = text(values, 'tenant') ?? null
  if (tenant !== null && !new RegExp(TENANT_ID_PATTERN).test(tenant)) throw new UsageError('--tenant must be a tenant id (lower-case letters, digits, - and _)')
  const limitOption = text(values, 'limit')
  const limit = limitOption === undefined ? 100 : Number(limitOption)
  if (action === 'list' && (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000)) throw new UsageError('--limit must be an integer from 1 to 10000')
  const ids = (values.id ?? []) as string[]
  const all = values.all === true
  if (action === 'list' && (all || ids.length > 0)) throw new UsageError('--all and --id go with replay')
  if (action === 'replay' && limitOption !== undefined) throw new UsageError('--limit goes with list')
  if (action === 'replay' && all === (ids.length > 0)) throw new UsageError('replay needs either --all or --id ID')
  if (action === 'replay' && ids.length > 0 && tenant !== null) throw new UsageError('--tenant goes with --all; an id names its tenant')

  const config = redisForTool(env, 'dead letters are kept in Redis: set REDIS_URL (or REDIS_SENTINELS, REDIS_CLUSTER_NODES) as for the service. Without Redis they live in the service process and are only logged.')
  const { queue, close } = openRedisWebhookQueue(config.redis, { perTenant: config.webhooks.maxQueuedPerTenant })
  try {
    if (action === 'list') {
      const letters = await queue.deadLetters(tenant, limit).catch((error: unknown) => { throw redisFailure(config, error) })
      for (const letter of letters) {
        const { delivery } = letter
        out(JSON.stringify({
          id: letter.id,
          deadAt: new Date(letter.deadAtMs).toISOString(),
          reason: letter.reason,
          tenant: delivery.tenant,
          url: delivery.url,
          type: delivery.type,
          messageId: delivery.messageId,
          attempts: delivery.attempts,
          queuedAt: new Date(delivery.createdAtMs).toISOString(),
          lastError: delivery.lastError ?? null
        }))
      }
      if (letters.length === 0) note(tenant === null ? 'No dead letters.' : `No dead letters for tenant ${tenant}.`)
      return
    }
    const result = await queue.replay(tenant, all ? null : ids).catch((error: unknown) => { throw redisFailure(config, error) })
    out(`replayed ${plural(result.replayed, 'dead letter')}`)
    const problems: string[] = []
    if (result.unknown.length > 0) problems.push(`no dead letter ${result.unknown.join(', ')} (ids are <tenant>/<id>, as dead-letters list prints them)`)
    if (result.full > 0) problems.push(`${plural(result.full, 'dead letter')} left: the tenant's queue is full (WEBHOOK_MAX_QUEUED_PER_TENANT); replay once it has drained`)
    if (problems.length > 0) throw new CommandError(problems.join('; '))
  } finally {
    close()
  }
}
