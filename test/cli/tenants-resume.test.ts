/*
 * `email-otp tenants resume ID`: its refusals, each a line and an exit code. Lifting a real pause
 * in Redis is test/routes/reputation.test.ts, against a running service.
 */
import t from 'tap'
import { runCli, type CliFailure } from '../support/cli.js'
import { REPUTATION_PAUSED_KEY } from '../../lib/state/redis/keys.js'
import { redisTestOptions, redisWithClients, startRedis } from '../support/redis.js'

async function failure (argv: string[], env: Record<string, string> = {}): Promise<{ code: number, stderr: string }> {
  const outcome = await runCli(argv, env).then(() => null, (error: CliFailure) => error)
  return { code: outcome?.code ?? 0, stderr: outcome?.stderr ?? '' }
}

t.test('resume needs one tenant id, a well-formed one, and Redis', async (t) => {
  t.match(await failure(['tenants', 'resume']), { code: 2, stderr: /resume needs the tenant id/ })
  t.match(await failure(['tenants', 'resume', 'Acme!']), { code: 2, stderr: /resume needs a tenant id/ })
  t.match(await failure(['tenants', 'resume', 'acme', 'globex']), { code: 2, stderr: /unexpected argument globex/ })
  t.match(await failure(['tenants', 'resume', 'acme']), { code: 1, stderr: /without Redis .* cannot reach/ })
  t.match(await failure(['tenants', 'resume', 'acme'], { REDIS_URL: 'redis://127.0.0.1:6379', REPUTATION_WINDOW: '90m' }), { code: 1, stderr: /REPUTATION_WINDOW must be whole hours/ })
})

t.test('resume of a tenant that is not paused says so and starts its window afresh', redisTestOptions(), async (t) => {
  const redis = await startRedis()
  t.teardown(async () => { await redis.stop() })
  const { stdout } = await runCli(['tenants', 'resume', 'acme'], { REDIS_URL: redis.url })
  t.equal(stdout, 'acme: live sending was not paused; its reputation window starts afresh\n')
})

t.test('resume of a stored pause that cannot be read removes it and says so', redisTestOptions(), async (t) => {
  const { server, client } = await redisWithClients(t)
  await client.hset(REPUTATION_PAUSED_KEY, 'acme', 'not json', 'globex', '{"sent":1}')
  const { stdout } = await runCli(['tenants', 'resume', 'acme'], { REDIS_URL: server.url })
  t.match(stdout, /^acme: live sending resumed \(its stored pause could not be read, .*JSON.*, and was removed\)/)
  t.equal(await client.hexists(REPUTATION_PAUSED_KEY, 'acme'), 0)
  t.equal(await client.hget(REPUTATION_PAUSED_KEY, 'globex'), '{"sent":1}', 'the other tenant\'s field stays')
})
