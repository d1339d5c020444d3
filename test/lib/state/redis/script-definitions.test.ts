/*
 * ioredis copies every script defined on a client onto each pipeline it makes, and with
 * auto-pipelining it makes one per batch: at a few requests per turn of the event loop, one per
 * request. A definition per key count of the verification log's script (up to 259) made that
 * copy a fifth of a dispatch's CPU at 1,500 dispatches a second. On a single server each script
 * is defined once; on a Cluster only the admission scripts are defined per key count
 * (lib/state/redis/keyed-script.ts), and test/server/redis-cluster.test.ts checks they still
 * go with their keys there.
 */
import t from 'tap'
import { createState } from '../../../../lib/state/index.js'
import { connectFailFast, redisTestOptions, startRedis } from '../../../support/redis.js'

/** Every store's scripts, each once, with room for a few more. */
const MOST_DEFINITIONS = 40

t.test('the stores on one server define each script once, however many keys it takes', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(server.stop)
  const client = await connectFailFast(server.url)
  t.teardown(() => { client.disconnect() })
  const state = createState(client, { memoryStoreMaxTokens: 1000, feedbackDedupeTtlMs: 60_000 })
  t.teardown(state.close)
  const defined = Object.keys((client as unknown as { scriptsSet: Record<string, unknown> }).scriptsSet)
  t.ok(defined.length <= MOST_DEFINITIONS, `${defined.length} scripts defined, at most ${MOST_DEFINITIONS}`)
  t.notOk(defined.some((name) => /\d$/.test(name)), 'none once per key count')
  t.ok(defined.includes('emailOtpVerificationLog'), 'the verification log\'s script is among them')
})
