/*
 * `email-otp tenants resume ID`: its refusals, each a line and an exit code. Lifting a real pause
 * in Redis is test/routes/reputation.test.ts, against a running service.
 */
import t from 'tap'
import { writeTenants } from '../helper.js'
import { runCli, type CliFailure } from '../support/cli.js'
import { REPUTATION_PAUSED_KEY, reputationBucketKey } from '../../lib/state/redis/keys.js'
import { reputationBucket } from '../../lib/state/reputation.js'
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
  const { path } = writeTenants(t)
  const { stdout } = await runCli(['tenants', 'resume', 'acme'], { REDIS_URL: redis.url, TENANTS_FILE: path })
  t.equal(stdout, 'acme: live sending was not paused; its reputation window starts afresh\n')
})

t.test('resume of an id that is not a tenant of the file is refused, and changes nothing', redisTestOptions(), async (t) => {
  const { server, client } = await redisWithClients(t)
  const { path } = writeTenants(t)
  await client.hset(REPUTATION_PAUSED_KEY, 'acmee', '{"sent":20,"bounced":2,"complained":0,"sinceMs":1}')
  const counts = reputationBucketKey('acmee', reputationBucket(Date.now()))
  await client.hset(counts, 'sent', '20')
  const env = { REDIS_URL: server.url, TENANTS_FILE: path }
  t.match(await failure(['tenants', 'resume', 'acmee'], env), { code: 1, stderr: new RegExp(`acmee is not a tenant of ${path} .*nothing was resumed`) })
  t.equal(await client.hexists(REPUTATION_PAUSED_KEY, 'acmee'), 1, 'its pause stays')
  t.equal(await client.hget(counts, 'sent'), '20', 'its counts stay')
  t.match(await failure(['tenants', 'resume', 'acme', '--file', `${path}.missing`], env), { code: 1, stderr: /tenants file .*\.missing cannot be read: ENOENT/ }, '--file names the file')
  t.match(await failure(['tenants', 'check', '--file', path], env), { code: 2, stderr: /--file is for resume/ })
  t.match((await runCli(['tenants', 'resume', 'acme', '--file', path], { REDIS_URL: server.url })).stdout, /^acme: live sending was not paused/)
})

t.test('resume of a stored pause that cannot be read removes it and says so', redisTestOptions(), async (t) => {
  const { server, client } = await redisWithClients(t)
  const { path } = writeTenants(t)
  await client.hset(REPUTATION_PAUSED_KEY, 'acme', 'not json', 'globex', '{"sent":1}')
  const { stdout } = await runCli(['tenants', 'resume', 'acme'], { REDIS_URL: server.url, TENANTS_FILE: path })
  t.match(stdout, /^acme: live sending resumed \(its stored pause could not be read, .*JSON.*, and was removed\)/)
  t.equal(await client.hexists(REPUTATION_PAUSED_KEY, 'acme'), 0)
  t.equal(await client.hget(REPUTATION_PAUSED_KEY, 'globex'), '{"sent":1}', 'the other tenant\'s field stays')
})
