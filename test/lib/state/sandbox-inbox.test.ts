import t from 'tap'
import { Redis } from 'ioredis'
import { MemorySandboxInbox } from '../../../lib/state/memory/sandbox-inbox.js'
import type { SandboxMessage } from '../../../lib/state/sandbox-inbox.js'
import { decodeJsonSandboxEntry, decodeSandboxEntry, encodeSandboxEntry } from '../../../lib/state/redis/sandbox-entry.js'
import { RedisSandboxInbox } from '../../../lib/state/redis/sandbox-inbox.js'
import { redisTestOptions, startRedis } from '../../support/redis.js'

function message (to: string, requestId: string): SandboxMessage {
  return { requestId, to, from: 'noreply@example.com', subject: 's', text: 't', html: 'h', code: '123456', createdAt: new Date().toISOString() }
}

t.test('in process, each tenant keeps its own addresses: a flood through one never empties another\'s inbox', async (t) => {
  const inbox = new MemorySandboxInbox(3)
  await inbox.add('globex', message('qa@globex.test', 'g1'))
  for (let i = 0; i < 100; i++) await inbox.add('acme', message(`flood${i}@example.com`, `a${i}`))
  t.strictSame((await inbox.list('globex', 'QA@globex.test')).map((m) => m.requestId), ['g1'], 'globex\'s message is still there')
  t.strictSame((await inbox.list('acme', 'flood99@example.com')).map((m) => m.requestId), ['a99'], 'acme keeps its most recent addresses')
  t.strictSame(await inbox.list('acme', 'flood0@example.com'), [], 'and forgets its own oldest')
})

t.test('in process, a tenant\'s large messages are bounded by characters: its own oldest boxes go, never another tenant\'s', async (t) => {
  const budget = 1_000_000
  const inbox = new MemorySandboxInbox(1000, budget)
  await inbox.add('globex', message('qa@globex.test', 'g1'))
  // Messages of about 330,000 characters, as a tenant's largest templates make them: three fit, not four.
  const large = (to: string, requestId: string): SandboxMessage => ({ ...message(to, requestId), text: 't'.repeat(64 * 1024), html: 'h'.repeat(256 * 1024) })
  for (let i = 0; i < 50; i++) await inbox.add('acme', large(`big${i}@example.com`, `a${i}`))
  const kept = []
  for (let i = 0; i < 50; i++) if ((await inbox.list('acme', `big${i}@example.com`)).length > 0) kept.push(i)
  t.strictSame(kept, [47, 48, 49], 'acme keeps its most recent boxes that fit its share')
  t.strictSame((await inbox.list('globex', 'qa@globex.test')).map((m) => m.requestId), ['g1'], 'globex\'s message is still there')

  // One address receiving large messages again and again keeps the newest that fit, and the box just written stays.
  for (let i = 0; i < 10; i++) await inbox.add('acme', large('same@example.com', `s${i}`))
  t.strictSame((await inbox.list('acme', 'same@example.com')).map((m) => m.requestId), ['s9', 's8', 's7', 's6', 's5', 's4', 's3', 's2', 's1', 's0'], 'a box over the share on its own is still kept whole: the newest write never goes')
  t.strictSame(await inbox.list('acme', 'big49@example.com'), [], 'while every older box of the tenant went')
})

t.test('a Redis entry holds the message exactly, whatever its parts contain', async (t) => {
  const tricky: SandboxMessage = {
    ...message('qa@globex.test', 'r1'),
    subject: 'Line "one"\\ é — ✓',
    text: '\nstarts with a newline\n{"textLength":1}\n\u0000\u0001 🙂 \ud800 end\n',
    html: '<p>\n</p>{"looks":"like JSON"}\n'
  }
  for (const sample of [tricky, { ...tricky, text: '', html: '' }, { ...tricky, text: '', html: 'only html\n' }, { ...tricky, text: 't'.repeat(64 * 1024), html: 'h\n'.repeat(128 * 1024) }]) {
    t.strictSame(decodeSandboxEntry(encodeSandboxEntry(sample)), sample)
  }
  for (const entry of ['', 'no header', '{"textLength":5}\nabc', '{"textLength":-1}\nabc', '{"textLength":"2"}\nabc', 'null\n', '{broken\nabc']) {
    t.equal(decodeSandboxEntry(entry), null, `${JSON.stringify(entry)} is no entry`)
  }
  t.equal(decodeJsonSandboxEntry('{broken'), null)
})

t.test('on Redis', redisTestOptions(), async (t) => {
  const server = await startRedis()
  t.teardown(async () => { await server.stop() })
  const client = new Redis(server.url, { maxRetriesPerRequest: 0, commandTimeout: 2000 })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  const inbox = new RedisSandboxInbox(client)

  t.test('a large message comes back whole, newest first, kept apart per tenant', async (t) => {
    await client.flushall()
    const large = { ...message('big@example.com', 'b1'), text: `${'.\n'.repeat(32 * 1024)}123456`, html: `<!--${'.\n'.repeat(128 * 1024)}-->123456` }
    await inbox.add('acme', large)
    await inbox.add('acme', { ...message('big@example.com', 'b2'), createdAt: new Date(Date.now() + 1).toISOString() })
    const listed = await inbox.list('acme', 'BIG@example.com')
    t.strictSame(listed.map((m) => m.requestId), ['b2', 'b1'])
    t.strictSame(listed[1], large)
    t.strictSame(await inbox.list('globex', 'big@example.com'), [], 'another tenant sees none of it')
  })

  t.test('messages an earlier version wrote (one JSON object each) are still listed, in order with the new ones', async (t) => {
    await client.flushall()
    const earlier = { ...message('qa@globex.test', 'old'), createdAt: new Date(Date.now() - 60_000).toISOString() }
    const expired = { ...message('qa@globex.test', 'expired'), createdAt: new Date(Date.now() - 2 * 60 * 60 * 1000).toISOString() }
    await client.lpush('sandbox:{globex}:qa@globex.test', JSON.stringify(expired), JSON.stringify(earlier), '{broken')
    await inbox.add('globex', message('qa@globex.test', 'new'))
    t.strictSame((await inbox.list('globex', 'qa@globex.test')).map((m) => m.requestId), ['new', 'old'], 'the fresh ones, newest first; the broken and expired ones left out')
    t.strictSame(await client.lrange('sandbox:{globex}:qa@globex.test', 0, -1).then((entries) => entries.length), 3, 'the earlier key is never written')
    t.equal(await client.llen('sandbox-entries:{globex}:qa@globex.test'), 1)
  })
})
