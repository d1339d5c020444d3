import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { setTimeout as sleep } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { MemorySandboxInbox } from '../../../lib/state/memory/sandbox-inbox.js'
import { SANDBOX_MESSAGES_PER_ADDRESS, SANDBOX_RETENTION_MS, type SandboxMessage } from '../../../lib/state/sandbox-inbox.js'
import { decodeJsonSandboxEntry, decodeSandboxEntry, encodeSandboxEntry } from '../../../lib/state/redis/sandbox-entry.js'
import { CodePieces } from '../../../lib/code-pieces.js'
import { sandboxEntriesKeyPrefix, sandboxShareKeys } from '../../../lib/state/redis/keys.js'
import { RedisSandboxInbox } from '../../../lib/state/redis/sandbox-inbox.js'
import { redisTestOptions, startRedis } from '../../support/redis.js'
import { until } from '../../support/wait.js'

/** A part's pieces as a template's render leaves them: its output cut where the code goes. */
const MARK = '\ue000code\ue001'
const piecesOf = (pieces: readonly string[]): CodePieces => CodePieces.split(pieces.join(MARK), MARK)

function message (to: string, requestId: string): SandboxMessage {
  return { requestId, to, from: 'noreply@example.com', subject: 's', text: 't', html: 'h', code: '123456', createdAt: new Date().toISOString() }
}

/** About 330,000 characters (and bytes), as a tenant's largest templates make a message: three fit in 1,000,000, not four. */
function large (to: string, requestId: string): SandboxMessage {
  return { ...message(to, requestId), text: 't'.repeat(64 * 1024), html: 'h'.repeat(256 * 1024) }
}

t.test('in process, each tenant keeps its own addresses: a flood through one never empties another\'s inbox', async (t) => {
  const inbox = new MemorySandboxInbox(3)
  await inbox.add('globex', message('qa@globex.test', 'g1'))
  for (let i = 0; i < 100; i++) await inbox.add('acme', message(`flood${i}@example.com`, `a${i}`))
  t.strictSame((await inbox.list('globex', 'QA@globex.test')).map((m) => m.requestId), ['g1'], 'globex\'s message is still there')
  t.strictSame((await inbox.list('acme', 'flood99@example.com')).map((m) => m.requestId), ['a99'], 'acme keeps its most recent addresses')
  t.strictSame(await inbox.list('acme', 'flood0@example.com'), [], 'and forgets its own oldest')
})

t.test('in process, a part made of a tenant\'s pieces is kept as those pieces, however the sent string was encoded', async (t) => {
  setFlagsFromString('--expose-gc')
  const collect = runInNewContext('gc') as () => void
  const pieces = ['<p>'.repeat(21_845), '</p>'.repeat(16_384)]
  const rendered = piecesOf(pieces)
  const inbox = new MemorySandboxInbox(1000, Number.MAX_SAFE_INTEGER)
  collect()
  const before = process.memoryUsage().heapUsed
  for (let i = 0; i < 100; i++) {
    const code = String(100_000 + i)
    const sent = { ...message(`box${i}@example.com`, `r${i}`), code, text: `${pieces[0] ?? ''}${code}${pieces[1] ?? ''}` }
    await inbox.add('acme', sent, { text: rendered, html: null })
    // What the log transport does with the sent text: V8 flattens it in place, 128 KiB each.
    Buffer.from(sent.text)
  }
  collect()
  const grown = process.memoryUsage().heapUsed - before
  t.ok(grown < 2 * 1024 * 1024, `100 kept messages grew the heap by ${(grown / 1024).toFixed(0)} KiB, not by 100 copies of their 128 KiB text (12.5 MiB)`)
  const [kept] = await inbox.list('acme', 'box7@example.com')
  t.equal(kept?.text, `${pieces[0] ?? ''}100007${pieces[1] ?? ''}`, 'the listed text is the pieces joined with the message\'s own code')
  t.equal(kept?.html, 'h', 'a part not made of pieces is kept as sent')
})

t.test('in process, a tenant\'s large messages are bounded by characters: its own oldest boxes go, never another tenant\'s', async (t) => {
  const budget = 1_000_000
  const inbox = new MemorySandboxInbox(1000, budget)
  await inbox.add('globex', message('qa@globex.test', 'g1'))
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
    t.strictSame(decodeSandboxEntry(encodeSandboxEntry(sample)), { message: sample, textPieces: null, htmlPieces: null })
    // A part named by its pieces is not in the entry; the other part is, exactly.
    t.strictSame(decodeSandboxEntry(encodeSandboxEntry(sample, { text: 'T1', html: null })), { message: { ...sample, text: '' }, textPieces: 'T1', htmlPieces: null })
    t.strictSame(decodeSandboxEntry(encodeSandboxEntry(sample, { text: null, html: 'H1' })), { message: { ...sample, html: '' }, textPieces: null, htmlPieces: 'H1' })
    t.ok(encodeSandboxEntry(sample, { text: 'T1', html: 'H1' }).length < 400, 'an entry whose parts are both pieces holds neither')
  }
  for (const entry of ['', 'no header', '{"textLength":5}\nabc', '{"textLength":-1}\nabc', '{"textLength":"2"}\nabc', 'null\n', '{broken\nabc', '{"textLength":0,"textPieces":""}\n', '{"textLength":0,"htmlPieces":7}\n']) {
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

  /** The bytes of each of a tenant's boxes, read from the lists themselves. */
  async function held (tenant: string): Promise<Record<string, number>> {
    const prefix = sandboxEntriesKeyPrefix(tenant)
    const boxes: Record<string, number> = {}
    for (const key of await client.keys(`${prefix}*`)) {
      boxes[key.slice(prefix.length)] = (await client.lrangeBuffer(key, 0, -1)).reduce((sum, entry) => sum + entry.length, 0)
    }
    return boxes
  }
  const sum = (boxes: Record<string, number>): number => Object.values(boxes).reduce((total, bytes) => total + bytes, 0)

  /** Where a tenant's share (its boxes, their bytes, the total) disagrees with what its lists hold, or null. */
  async function drift (tenant: string): Promise<string | null> {
    const keys = sandboxShareKeys(tenant)
    const lists = await held(tenant)
    const recordedBytes = Object.entries(await client.hgetall(keys.bytes)).map(([address, bytes]): [string, number] => [address, Number(bytes)])
    const recorded = JSON.stringify({
      total: Number(await client.get(keys.total) ?? 0),
      bytes: Object.fromEntries(recordedBytes.sort()),
      boxes: (await client.zrange(keys.boxes, '0', '-1')).sort()
    })
    const actual = JSON.stringify({ total: sum(lists), bytes: Object.fromEntries(Object.entries(lists).sort()), boxes: Object.keys(lists).sort() })
    return recorded === actual ? null : `recorded ${recorded}, held ${actual}`
  }

  /** A tenant's keys, each with its content and its time to live. */
  async function snapshot (tenant: string): Promise<Map<string, { dump: string, ttlMs: number }>> {
    const keys = new Map<string, { dump: string, ttlMs: number }>()
    for (const key of (await client.keys(`*{${tenant}}*`)).sort()) {
      keys.set(key, { dump: (await client.dumpBuffer(key)).toString('hex'), ttlMs: await client.pttl(key) })
    }
    return keys
  }
  function untouched (t: Test, before: Map<string, { dump: string, ttlMs: number }>, after: Map<string, { dump: string, ttlMs: number }>): void {
    t.strictSame([...after.keys()], [...before.keys()], 'the other tenant\'s keys are the same keys')
    t.ok([...after].every(([key, { dump, ttlMs }]) => dump === before.get(key)?.dump && ttlMs <= (before.get(key)?.ttlMs ?? -1)), 'with the same content, none of them written again (no expiry pushed back)')
  }

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

  t.test('a flood of addresses through one tenant never empties another\'s inbox, and forgets its own oldest', async (t) => {
    await client.flushall()
    const capped = new RedisSandboxInbox(client, { addressesPerTenant: 3 })
    await capped.add('globex', message('qa@globex.test', 'g1'))
    const globex = await snapshot('globex')
    let most = 0
    for (let i = 0; i < 100; i++) {
      await capped.add('acme', message(`flood${i}@example.com`, `a${i}`))
      most = Math.max(most, Object.keys(await held('acme')).length, await client.zcard(sandboxShareKeys('acme').boxes))
    }
    t.equal(most, 3, 'acme never holds, nor indexes, more than its 3 addresses')
    t.strictSame((await capped.list('globex', 'QA@globex.test')).map((m) => m.requestId), ['g1'], 'globex\'s message is still there')
    for (const i of [97, 98, 99]) t.strictSame((await capped.list('acme', `flood${i}@example.com`)).map((m) => m.requestId), [`a${i}`], `acme keeps its most recent addresses (flood${i})`)
    t.strictSame(await capped.list('acme', 'flood96@example.com'), [], 'and forgets its own oldest')
    t.equal(await drift('acme'), null, 'acme\'s share is what its lists hold')
    untouched(t, globex, await snapshot('globex'))
  })

  t.test('a tenant\'s large messages are bounded by bytes: its own oldest boxes go, never another tenant\'s', async (t) => {
    await client.flushall()
    const budget = 1_000_000
    const bounded = new RedisSandboxInbox(client, { bytesPerTenant: budget })
    await bounded.add('globex', message('qa@globex.test', 'g1'))
    const globex = await snapshot('globex')
    let most = 0
    for (let i = 0; i < 50; i++) {
      await bounded.add('acme', large(`big${i}@example.com`, `a${i}`))
      most = Math.max(most, sum(await held('acme')), Number(await client.get(sandboxShareKeys('acme').total)))
    }
    t.ok(most <= budget, `acme never holds more than its budget (at most ${most} bytes)`)
    const kept = []
    for (let i = 0; i < 50; i++) if ((await bounded.list('acme', `big${i}@example.com`)).length > 0) kept.push(i)
    t.strictSame(kept, [47, 48, 49], 'acme keeps its most recent boxes that fit its share')
    t.strictSame((await bounded.list('globex', 'qa@globex.test')).map((m) => m.requestId), ['g1'], 'globex\'s message is still there')

    // One address receiving large messages again and again keeps its box whole, over the budget on its own.
    const sent = []
    for (let i = 0; i < 10; i++) {
      await bounded.add('acme', large('same@example.com', `s${i}`))
      sent.unshift(`s${i}`)
      const lists = await held('acme')
      if (sum(lists) > budget) t.strictSame(Object.keys(lists), ['same@example.com'], `past the budget after s${i}, only the box just written is left`)
    }
    t.strictSame((await bounded.list('acme', 'same@example.com')).map((m) => m.requestId), sent, 'a box over the share on its own is still kept whole: the newest write never goes')
    t.strictSame(await bounded.list('acme', 'big49@example.com'), [], 'while every older box of the tenant went')
    t.equal(await drift('acme'), null, 'acme\'s share is what its lists hold')
    untouched(t, globex, await snapshot('globex'))
  })

  t.test('the share\'s bytes stay exact through trims, evictions and a box an earlier build wrote', async (t) => {
    await client.flushall()
    const addresses = 4
    const budget = 200_000
    const bounded = new RedisSandboxInbox(client, { addressesPerTenant: addresses, bytesPerTenant: budget })
    await bounded.add('globex', message('qa@globex.test', 'g1'))
    const globex = await snapshot('globex')
    // A box written before the share existed: measured on its next write.
    await client.lpush(`${sandboxEntriesKeyPrefix('acme')}earlier@example.com`, encodeSandboxEntry(message('earlier@example.com', 'e0')))
    await bounded.add('acme', message('earlier@example.com', 'e1'))

    let seed = 7
    const random = (n: number): number => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n }
    const drifts: string[] = []
    const overBounds: string[] = []
    const forgotten = new Set<string>()
    let hot = 0
    for (let i = 0; i < 150; i++) {
      // One address in three writes gets more than SANDBOX_MESSAGES_PER_ADDRESS, so its list is trimmed.
      const to = random(3) === 0 ? 'hot@example.com' : `box${random(8)}@example.com`
      if (to === 'hot@example.com') hot++
      // Multi-byte characters, so that bytes and characters differ.
      await bounded.add('acme', { ...message(to, `m${i}`), text: 'aé🙂'.repeat(random(600)), html: 'h'.repeat(random(6000)) })
      const lists = await held('acme')
      const difference = await drift('acme')
      if (difference !== null) drifts.push(`after m${i}: ${difference}`)
      const alone = Object.keys(lists).length === 1 && lists[to] !== undefined
      if (Object.keys(lists).length > addresses || (sum(lists) > budget && !alone)) overBounds.push(`after m${i}: ${JSON.stringify(lists)}`)
      for (let box = 0; box < 8; box++) if (lists[`box${box}@example.com`] === undefined && to !== `box${box}@example.com`) forgotten.add(`box${box}`)
    }
    t.strictSame(drifts, [], 'after every write, the recorded bytes of each box and their total are what its list holds')
    t.strictSame(overBounds, [], `after every write, at most ${addresses} boxes and ${budget} bytes, unless the box just written is alone`)
    t.ok(hot > SANDBOX_MESSAGES_PER_ADDRESS && forgotten.size > 0, `trims (${hot} writes to one address) and evictions happened`)
    untouched(t, globex, await snapshot('globex'))
  })

  t.test('expired boxes leave the share, and count against no budget', async (t) => {
    await client.flushall()
    const retentionMs = 4000
    const budget = 1_000_000
    const brief = new RedisSandboxInbox(client, { bytesPerTenant: budget, retentionMs })
    await brief.add('acme', large('a@example.com', 'a1'))
    await brief.add('acme', large('b@example.com', 'b1'))
    // A later write keeps the share alive past the first two boxes: written 3 s later (at
    // least), it outlives them by as much, the time the checks below have on a busy machine.
    await sleep(3000)
    await brief.add('acme', message('later@example.com', 'l1'))
    await until('the first two lists to expire', async () => !('a@example.com' in await held('acme')) && !('b@example.com' in await held('acme')))
    t.strictSame(Object.keys(await held('acme')), ['later@example.com'], 'the first two lists have expired')
    t.equal(await client.zcard(sandboxShareKeys('acme').boxes), 3, 'while the share still lists them')

    // The address written again, then two more large boxes: the expired ones out of the share, everything live fits.
    await brief.add('acme', large('a@example.com', 'a2'))
    t.equal(await drift('acme'), null, 'the next write takes them out of the share')
    await brief.add('acme', large('c@example.com', 'c1'))
    await brief.add('acme', large('d@example.com', 'd1'))
    t.strictSame(Object.keys(await held('acme')).sort(), ['a@example.com', 'c@example.com', 'd@example.com', 'later@example.com'], 'nothing live was forgotten')
    t.strictSame((await brief.list('acme', 'a@example.com')).map((m) => m.requestId), ['a2'], 'the rewritten box holds its new message only')
    t.equal(await drift('acme'), null)

    // A list gone a moment before its last write says (Redis expires keys on its own clock) is counted from nothing.
    await client.pexpire(`${sandboxEntriesKeyPrefix('acme')}c@example.com`, 1)
    await until('the list to expire', async () => await client.exists(`${sandboxEntriesKeyPrefix('acme')}c@example.com`) === 0)
    await brief.add('acme', message('c@example.com', 'c2'))
    t.strictSame((await brief.list('acme', 'c@example.com')).map((m) => m.requestId), ['c2'])
    t.equal(await drift('acme'), null, 'its earlier bytes are out of the share')

    // Every key of the share expires with the last box (the share's own a moment after it).
    await until('the tenant\'s boxes and share to expire', async () => (await client.keys('*{acme}*')).length === 0)
    t.strictSame(await client.keys('*{acme}*'), [], 'the share goes with the last of the tenant\'s boxes')
  })

  t.test('a minute\'s pieces go to Redis once: each message carries its code only, and lists back whole', async (t) => {
    await client.flushall()
    const text = ['.\n'.repeat(32 * 1024) + 'Your code: ', '\n']
    const html = [`<!--${'.\n'.repeat(128 * 1024)}-->`, '</p>']
    const sent: SandboxMessage[] = []
    await client.config('RESETSTAT')
    for (let i = 0; i < 10; i++) {
      const code = String(100000 + i)
      const whole = { ...message('big@example.com', `p${i}`), code, text: text.join(code), html: html.join(code), createdAt: new Date(Date.now() + i).toISOString() }
      sent.unshift(whole)
      // Every message gets pieces of its own, as every instance renders its own.
      await inbox.add('acme', whole, { text: piecesOf(text), html: piecesOf(html) })
    }
    const received = Number(/total_net_input_bytes:(\d+)/.exec(await client.info('stats'))?.[1])
    const once = text.join('').length + html.join('').length
    t.ok(received > once && received < once + 20_000, `Redis received ${received} bytes for ten messages of ${once.toLocaleString('en')} bytes each: the pieces once`)
    t.strictSame(await inbox.list('acme', 'big@example.com'), sent, 'each message listed whole, with its own code, newest first')
    t.equal((await client.keys('sandbox-pieces:{acme}:*')).length, 2, 'one key per part')
    const entries = await client.lrange(`${sandboxEntriesKeyPrefix('acme')}big@example.com`, 0, -1)
    t.ok(entries.every((entry) => entry.length < 400), 'the entries hold no part')
    t.equal(await drift('acme'), null, 'the share counts the entries as they are')
    for (const key of await client.keys('sandbox-pieces:{acme}:*')) {
      const ttlMs = await client.pttl(key)
      t.ok(ttlMs > SANDBOX_RETENTION_MS - 60_000 && ttlMs <= SANDBOX_RETENTION_MS, 'the pieces live a retention after the last message naming them')
    }

    // Pieces gone (a flushed or restarted Redis): the messages naming them are no longer listed,
    // and the next message sends them again.
    await client.del(await client.keys('sandbox-pieces:{acme}:*'))
    t.strictSame(await inbox.list('acme', 'big@example.com'), [], 'no message is listed with a part missing')
    const again = { ...message('big@example.com', 'p10'), code: '999999', text: text.join('999999'), html: html.join('999999'), createdAt: new Date(Date.now() + 20).toISOString() }
    await inbox.add('acme', again, { text: piecesOf(text), html: piecesOf(html) })
    t.strictSame((await inbox.list('acme', 'big@example.com')).map((m) => m.requestId), ['p10', ...sent.map((m) => m.requestId)], 'sent again, the pieces serve every message naming them')
    t.strictSame((await inbox.list('acme', 'big@example.com'))[0], again)

    // A part in the built-in wording (no pieces) is kept in the entry, next to a part from pieces.
    const mixed = { ...message('mixed@example.com', 'm1'), text: 'built-in 123456', html: html.join('123456') }
    await inbox.add('acme', mixed, { text: null, html: piecesOf(html) })
    t.strictSame(await inbox.list('acme', 'mixed@example.com'), [mixed])
    t.strictSame(await inbox.list('globex', 'big@example.com'), [], 'another tenant sees none of it')
    t.equal((await client.keys('sandbox-pieces:{globex}:*')).length, 0)
  })
})
