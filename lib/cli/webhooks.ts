import { parseArgs } from 'node:util'
import { Cluster, Redis } from 'ioredis'
import { pino } from 'pino'
import { parseConfig, type RedisTopology } from '../config.js'
import type { RedisClient } from '../redis/client.js'
import { RedisWebhookQueue } from '../webhooks/redis-queue.js'
import { WebhookPayloadsDocument } from '../../schemas/webhooks.js'

const usage = `Usage:
  npm run webhooks -- dead-letters list [--limit N]
  npm run webhooks -- dead-letters replay --all
  npm run webhooks -- dead-letters replay --id ID [--id ID]...
  npm run webhooks -- schema

dead-letters reads the queue of the Redis the service uses (REDIS_URL, REDIS_SENTINELS or
REDIS_CLUSTER_NODES, as for the service). list prints one JSON line per dead letter, newest
first. replay queues them again: same webhook-id, a new retry period; they leave the list.
schema prints the JSON Schema of the webhook payloads (schemas/webhooks.schema.json).`

class UsageError extends Error {}

/** The JSON Schema document of every webhook body, as published in schemas/webhooks.schema.json. */
export function webhooksJsonSchema (): string {
  return JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...WebhookPayloadsDocument }, null, 2) + '\n'
}

/** A short-lived client for one command: a few retries, then a clear failure. */
function connect (topology: RedisTopology): RedisClient {
  const options = { maxRetriesPerRequest: 2, connectTimeout: 5000, retryStrategy: (attempt: number) => attempt > 3 ? null : 200 * attempt }
  switch (topology.kind) {
    case 'single':
      return new Redis(topology.url, options)
    case 'sentinel':
      return new Redis({
        ...options,
        sentinels: topology.sentinels,
        name: topology.name,
        role: 'master',
        username: topology.username ?? undefined,
        password: topology.password ?? undefined,
        tls: topology.tls ? {} : undefined,
        enableTLSForSentinelMode: topology.tls
      })
    case 'cluster':
      return new Cluster(topology.nodes, {
        scaleReads: 'master',
        redisOptions: { ...options, username: topology.username ?? undefined, password: topology.password ?? undefined, tls: topology.tls ? {} : undefined }
      })
  }
}

export async function run (argv: string[], env: Readonly<Record<string, string | undefined>>, out: (line: string) => void): Promise<void> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { limit: { type: 'string' }, all: { type: 'boolean' }, id: { type: 'string', multiple: true } }
  })
  const [command, action] = positionals
  if (command === 'schema') {
    out(webhooksJsonSchema().trimEnd())
    return
  }
  if (command !== 'dead-letters' || (action !== 'list' && action !== 'replay')) throw new UsageError('unknown command')
  const config = parseConfig(env)
  if (config.redis === null) {
    throw new UsageError('dead letters are kept in Redis: set REDIS_URL (or REDIS_SENTINELS, REDIS_CLUSTER_NODES) as for the service. Without Redis they live in the service process and are only logged.')
  }
  const client = connect(config.redis)
  client.on('error', () => {})
  try {
    const queue = new RedisWebhookQueue(client)
    if (action === 'list') {
      const limit = values.limit === undefined ? 100 : Number(values.limit)
      if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError('--limit must be an integer from 1 to 10000')
      for (const letter of await queue.deadLetters(limit)) {
        const { delivery } = letter
        out(JSON.stringify({
          id: letter.id,
          deadAt: new Date(letter.deadAtMs).toISOString(),
          tenant: delivery.tenant,
          url: delivery.url,
          type: delivery.type,
          messageId: delivery.messageId,
          attempts: delivery.attempts,
          queuedAt: new Date(delivery.createdAtMs).toISOString(),
          lastError: delivery.lastError ?? null
        }))
      }
      return
    }
    const ids = values.id ?? []
    if ((values.all === true) === (ids.length > 0)) throw new UsageError('replay needs either --all or --id ID')
    const replayed = await queue.replay(values.all === true ? null : ids)
    out(`replayed ${replayed} dead letter${replayed === 1 ? '' : 's'}`)
  } finally {
    client.disconnect()
  }
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1])) {
  const log = pino({ name: 'email-otp-webhooks' }, pino.destination(2))
  run(process.argv.slice(2), process.env, (line) => { process.stdout.write(line + '\n') }).catch((error: unknown) => {
    if (error instanceof UsageError) {
      process.stderr.write(`${error.message}\n\n${usage}\n`)
      process.exit(2)
    }
    log.error({ err: error }, 'webhooks command failed')
    process.exit(1)
  })
}
