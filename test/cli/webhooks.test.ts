/*
 * The webhooks CLI as a newcomer meets it: through `npm run webhooks`, without a build, with
 * --help on every command, with only the Redis variables set, and with one human line and a
 * non-zero exit for every error.
 */
import t, { type Test } from 'tap'
import { RedisWebhookQueue } from '../../lib/state/redis/webhook-queue.js'
import { connectFailFast, freePort, redisTestOptions, startRedis } from '../support/redis.js'
import { execForTest as exec } from '../support/processes.js'

const root = new URL('../..', import.meta.url).pathname

interface Outcome { code: number, stdout: string, stderr: string }

async function npmWebhooks (args: string[], env: Record<string, string> = {}): Promise<Outcome> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(REDIS_|OTP_HMAC_KEYS|WEBHOOK_)/.test(name)))
  try {
    const { stdout, stderr } = await exec('npm', ['run', '-s', 'webhooks', '--', ...args], { cwd: root, env: { ...clean, ...env }, timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (error) {
    const failed = error as { code: number, stdout: string, stderr: string }
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr }
  }
}

/** One human line first: no JSON log line, no stack. */
function humanError (t: Test, outcome: Outcome, message: RegExp): void {
  const [first] = outcome.stderr.split('\n')
  t.match(first, message)
  t.notMatch(outcome.stderr, /^\{|"level"|\n\s+at /m, 'no log line, no stack')
}

// 91 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('--help, for the CLI and each command, answers the usage and succeeds', async (t) => {
  const all = await npmWebhooks(['--help'])
  t.equal(all.code, 0)
  t.match(all.stdout, /^Usage:\n {2}email-otp webhooks dead-letters list/)
  const list = await npmWebhooks(['dead-letters', 'list', '--help'])
  t.equal(list.code, 0)
  t.match(list.stdout, /^Usage:\n {2}email-otp webhooks dead-letters list \[--tenant ID\] \[--limit N\]\n\nOne JSON line/)
  const replay = await npmWebhooks(['dead-letters', 'replay', '--help'])
  t.match(replay.stdout, /replay --id ID/)
  t.match((await npmWebhooks(['schema', '--help'])).stdout, /JSON Schema/)
})

t.test('a bad command line: one line saying what is wrong and where the usage is, exit 2', async (t) => {
  const unknownOption = await npmWebhooks(['dead-letters', 'list', '--nope'])
  t.same(unknownOption, { code: 2, stdout: '', stderr: "email-otp webhooks: Unknown option '--nope' (email-otp webhooks --help shows the usage)\n" })
  const noAction = await npmWebhooks(['dead-letters'])
  t.same(noAction, { code: 2, stdout: '', stderr: 'email-otp webhooks: dead-letters needs list or replay (email-otp webhooks --help shows the usage)\n' })
  const badTenant = await npmWebhooks(['dead-letters', 'list', '--tenant', '{x}'])
  humanError(t, badTenant, /^email-otp webhooks: --tenant must be a tenant id/)
  t.equal(badTenant.code, 2)
  const misplaced = await npmWebhooks(['dead-letters', 'list', '--all'])
  humanError(t, misplaced, /^email-otp webhooks: --all and --id go with replay/)
})

t.test('dead-letters without Redis, or with Redis down: one line, exit 1', async (t) => {
  const withoutRedis = await npmWebhooks(['dead-letters', 'list'])
  t.equal(withoutRedis.code, 1)
  humanError(t, withoutRedis, /^email-otp webhooks: dead letters are kept in Redis: set REDIS_URL/)
  const down = await npmWebhooks(['dead-letters', 'list'], { REDIS_URL: `redis://127.0.0.1:${await freePort()}` })
  t.equal(down.code, 1)
  humanError(t, down, /^email-otp webhooks: Redis \(REDIS_URL\) did not answer: /)
})

t.test('on a real Redis, with only REDIS_URL set (no OTP_HMAC_KEYS: the CLI signs nothing)', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const env = { REDIS_URL: redis.url }

  const empty = await npmWebhooks(['dead-letters', 'list'], env)
  t.same([empty.code, empty.stdout, empty.stderr], [0, '', 'No dead letters.\n'], 'an empty list says so on stderr, stdout stays empty for scripts')

  const client = await connectFailFast(redis.url)
  t.teardown(() => { client.disconnect() })
  const queue = new RedisWebhookQueue(client)
  await queue.enqueue([{ messageId: 'msg_cli', tenant: 'acme', url: 'https://hooks.acme.test/otp', type: 'verification.succeeded', body: '{}', createdAtMs: Date.now(), attempts: 0 }])
  for (const entry of await queue.claim('test', 10, 60_000)) await queue.bury('test', entry, { ...entry.delivery, attempts: 3, lastError: 'HTTP 500' })

  const listed = await npmWebhooks(['dead-letters', 'list', '--tenant', 'acme'], env)
  t.equal(listed.code, 0)
  const letter = JSON.parse(listed.stdout) as { id: string }
  t.match(letter, { id: /^acme\/\d+-\d+$/, reason: 'failed', tenant: 'acme', messageId: 'msg_cli', attempts: 3, lastError: 'HTTP 500' })

  const unknown = await npmWebhooks(['dead-letters', 'replay', '--id', 'acme/1-1'], env)
  t.equal(unknown.code, 1, 'an id that names no dead letter fails')
  t.equal(unknown.stdout, 'replayed 0 dead letters\n')
  humanError(t, unknown, /^email-otp webhooks: no dead letter acme\/1-1 \(ids are <tenant>\/<id>, as dead-letters list prints them\)$/)

  const replayed = await npmWebhooks(['dead-letters', 'replay', '--id', letter.id], env)
  t.same([replayed.code, replayed.stdout], [0, 'replayed 1 dead letter\n'])
  t.equal((await queue.backlog('acme')).depth, 1, 'queued again')
})
