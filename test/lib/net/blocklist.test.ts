import t from 'tap'
import { once } from 'node:events'
import { unlink, writeFile } from 'node:fs/promises'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { mock } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { BlockList, loadListSource, parseListText, type BlockListEvent } from '../../../lib/net/blocklist.js'
import { IpRangeSet } from '../../../lib/net/ip-ranges.js'

const LIMITS = { timeoutMs: 5_000, maxBytes: 64 * 1024 * 1024 }

/** `count` distinct IPv4 addresses, starting at the `from`th. */
function addresses (count: number, from = 0): string[] {
  return Array.from({ length: count }, (_, i) => {
    const value = 0x50000000 + (from + i) * 65537
    return `${value >>> 24}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`
  })
}

interface TestServer {
  url: string
  requests: () => number
  close: () => Promise<void>
}

/** A real HTTP server on 127.0.0.1; the handler may leave a request unanswered. */
async function serve (handler: (request: IncomingMessage, response: ServerResponse) => void): Promise<TestServer> {
  let requests = 0
  const server = createServer((request, response) => {
    requests++
    handler(request, response)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests: () => requests,
    close: async () => {
      // fetch keeps connections alive, and a hanging request never ends by itself.
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    }
  }
}

async function until (condition: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !condition(); waited += 10) {
    if (waited > 5_000) throw new Error(`gave up waiting for ${what}`)
    await sleep(10)
  }
}

t.test('parseListText: comments, blanks, whitespace, CRLF, BOM', async (t) => {
  const text = '\uFEFF# a header\r\n1.2.3.4\r\n\r\n   5.6.7.0/24   # trailing comment\r\n' +
    '\t2001:db8::/32\t\n#1.1.1.1\n  # indented comment\n::1\n203.0.113.0/24 ; SBL12345\n10.0.0.1'
  t.strictSame(parseListText(text), ['1.2.3.4', '5.6.7.0/24', '2001:db8::/32', '::1', '203.0.113.0/24', '10.0.0.1'])
  t.strictSame(parseListText(''), [])
  t.strictSame(parseListText('# only\n\n   \n# comments\n'), [])
})

t.test('parseListText: Tor bulk exit list', async (t) => {
  const text = '185.220.101.1\n185.220.101.2\n2a0b:f4c2::1\n'
  t.strictSame(parseListText(text), ['185.220.101.1', '185.220.101.2', '2a0b:f4c2::1'])
})

t.test('parseListText: Tor exit-addresses', async (t) => {
  const text = [
    'ExitNode 0011BD2485AD45D984EC4159C88FC066E5E3300E',
    'Published 2024-01-01 12:34:56',
    'LastStatus 2024-01-01 13:00:00',
    'ExitAddress 162.247.74.201 2024-01-01 13:05:31',
    'ExitNode 0101B2E0F0F1F4D6A8B3C1D9E7F6A5B4C3D2E1F0',
    'Published 2024-01-01 11:00:00',
    'LastStatus 2024-01-01 12:00:00',
    'ExitAddress 185.220.101.33 2024-01-01 12:10:00',
    'ExitAddress 185.220.101.34 2024-01-01 12:11:00',
    ''
  ].join('\n')
  t.strictSame(parseListText(text), ['162.247.74.201', '185.220.101.33', '185.220.101.34'])
})

t.test('parseListText: unknown multi-word lines surface as rejected entries', async (t) => {
  const entries = parseListText('1.2.3.4\n<html><body>captive portal</body></html>\n5.6.7.8 9.9.9.9\n')
  t.strictSame(entries, ['1.2.3.4', '<html><body>captive portal</body></html>', '5.6.7.8 9.9.9.9'])
  const { set, rejected } = IpRangeSet.fromEntries(entries)
  t.equal(set.size, 1)
  t.equal(rejected, 2)
})

t.test('loadListSource reads files and refuses oversized or missing ones', async (t) => {
  const dir = t.testdir({ 'list.txt': '1.2.3.4\n', 'big.txt': '1.2.3.4\n'.repeat(100) })
  t.equal(await loadListSource(join(dir, 'list.txt'), LIMITS), '1.2.3.4\n')
  await t.rejects(loadListSource(join(dir, 'big.txt'), { timeoutMs: 5_000, maxBytes: 799 }), /big\.txt: file larger than 799 bytes/)
  t.equal((await loadListSource(join(dir, 'big.txt'), { timeoutMs: 5_000, maxBytes: 800 })).length, 800)
  await t.rejects(loadListSource(join(dir, 'missing.txt'), LIMITS), /missing\.txt: .*ENOENT/)
  await t.rejects(loadListSource('https://[::1/list?token=hunter2', LIMITS), { message: '(invalid URL): not a valid URL' })
  await t.rejects(loadListSource('ftp://example.com/list.txt', LIMITS), /ftp:\/\/example\.com\/list\.txt: only file paths and http\(s\) URLs/)
})

t.test('loadListSource over HTTP: status, size limits, redaction', async (t) => {
  const server = await serve((request, response) => {
    switch (request.url) {
      case '/ok': response.end('1.2.3.4\n5.6.7.8\n'); break
      case '/declared': response.setHeader('content-length', 2000).end('x'.repeat(2000)); break
      case '/chunked':
        response.write('x'.repeat(600))
        response.end('x'.repeat(600))
        break
      case '/missing': response.writeHead(404).end('not here'); break
      default: response.writeHead(500).end('boom')
    }
  })
  t.teardown(server.close)
  t.equal(await loadListSource(`${server.url}/ok`, LIMITS), '1.2.3.4\n5.6.7.8\n')
  await t.rejects(loadListSource(`${server.url}/missing`, LIMITS), { message: `${server.url}/missing: HTTP 404` })
  await t.rejects(loadListSource(`${server.url}/declared`, { timeoutMs: 5_000, maxBytes: 1000 }), /declared: body larger than 1000 bytes/)
  await t.rejects(loadListSource(`${server.url}/chunked`, { timeoutMs: 5_000, maxBytes: 1000 }), /chunked: body larger than 1000 bytes/)
  t.equal((await loadListSource(`${server.url}/chunked`, { timeoutMs: 5_000, maxBytes: 1200 })).length, 1200)
  const failure = await loadListSource(`${server.url}/private?token=hunter2`, LIMITS).then(() => null, (error: unknown) => error)
  t.ok(failure instanceof Error)
  const message = failure instanceof Error ? failure.message : ''
  t.equal(message, `${server.url}/private?…: HTTP 500`)
  t.notMatch(message, /hunter2/, 'no query string in messages')
})

t.test('loadListSource explains a refused connection', async (t) => {
  const server = await serve(() => {})
  await server.close()
  await t.rejects(loadListSource(`${server.url}/list`, LIMITS), new RegExp(`^${server.url}/list: fetch failed \\(.*ECONNREFUSED`))
})

t.test('loadListSource times out a server that never answers', async (t) => {
  const server = await serve(() => {})
  t.teardown(server.close)
  await t.rejects(loadListSource(`${server.url}/list`, { timeoutMs: 50, maxBytes: 1000 }), { message: `${server.url}/list: timed out after 50 ms` })
})

t.test('a 10,000-entry Tor list loads from a file', async (t) => {
  const tor = addresses(10_000)
  const dir = t.testdir({ torbulkexitlist: tor.join('\n') + '\n' })
  const events: BlockListEvent[] = []
  const list = new BlockList({ name: 'tor', sources: [join(dir, 'torbulkexitlist')], refreshMs: 3_600_000, onEvent: (event) => events.push(event) })
  t.notOk(list.has(tor[0] as string), 'nothing loaded yet')
  await list.load()
  t.strictSame(events, [{ type: 'loaded', name: 'tor', entries: 10_000, rejected: 0 }])
  t.equal(list.status().entries, 10_000)
  for (const address of [tor[0], tor[4999], tor[9999]] as string[]) t.ok(list.has(address), address)
  t.ok(list.has(`::ffff:${tor[1234] as string}`))
  for (const address of addresses(3, 10_000)) t.notOk(list.has(address), address)
  t.notOk(list.has('127.0.0.1'))
})

t.test('a 500,000-prefix CIDR file loads, with a second source joined in', async (t) => {
  const lines = ['# hosting ranges, generated']
  for (let i = 0; i < 450_000; i++) {
    // Every other /24 from 1.0.0.0, so the ranges do not all merge into one.
    const value = 0x01000000 + i * 512
    lines.push(`${value >>> 24}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.0/24`)
  }
  for (let i = 0; i < 50_000; i++) lines.push(`2001:db8:${i.toString(16)}::/48`)
  const dir = t.testdir({ 'hosting.txt': lines.join('\n'), 'extra.txt': '198.51.100.7\n' })
  const list = new BlockList({ name: 'hosting', sources: [join(dir, 'hosting.txt'), join(dir, 'extra.txt')], refreshMs: 3_600_000 })
  await list.load()
  t.equal(list.status().entries, 500_001)
  t.ok(list.has('1.0.0.0'))
  t.ok(list.has('1.0.0.255'))
  t.notOk(list.has('1.0.1.0'), 'the skipped /24')
  t.ok(list.has('1.0.2.77'))
  const last = 0x01000000 + 449_999 * 512
  t.ok(list.has(`${last >>> 24}.${(last >>> 16) & 255}.${(last >>> 8) & 255}.255`))
  t.ok(list.has('2001:db8:c34f:ffff::1'))
  t.notOk(list.has('2001:db8:c350::1'), 'one /48 past the last')
  t.ok(list.has('198.51.100.7'), 'from the second source')
  t.notOk(list.has('198.51.100.8'))
})

t.test('refresh keeps the last good list when the source goes bad', async (t) => {
  let reply: { status: number, body: string } = { status: 200, body: addresses(100).join('\n') }
  const server = await serve((_request, response) => { response.writeHead(reply.status).end(reply.body) })
  t.teardown(server.close)
  let clock = Date.parse('2024-05-01T10:00:00Z')
  const events: BlockListEvent[] = []
  const list = new BlockList({
    name: 'proxies',
    sources: [`${server.url}/proxies.txt`],
    refreshMs: 3_600_000,
    now: () => clock,
    onEvent: (event) => events.push(event)
  })
  t.strictSame(list.status(), { name: 'proxies', entries: 0, loadedAt: null, ageSeconds: null, lastError: null })

  await list.load()
  t.strictSame(events.pop(), { type: 'loaded', name: 'proxies', entries: 100, rejected: 0 })
  t.strictSame(list.status(), { name: 'proxies', entries: 100, loadedAt: '2024-05-01T10:00:00.000Z', ageSeconds: 0, lastError: null })

  const kept = async (why: RegExp): Promise<void> => {
    clock += 60_000
    t.equal(await list.refresh(), false)
    const event = events.pop()
    t.equal(event?.type, 'kept')
    t.match(event, { name: 'proxies', reason: why })
    t.equal(events.length, 0, 'one event per refresh')
    t.ok(list.has(addresses(1)[0] as string), 'the old list still answers')
    t.match(list.status(), { entries: 100, loadedAt: '2024-05-01T10:00:00.000Z', lastError: why })
  }

  reply = { status: 500, body: 'internal error' }
  await kept(/proxies\.txt: HTTP 500/)
  reply = { status: 200, body: '' }
  await kept(/the new list is empty/)
  reply = { status: 200, body: '<html>\n<body>Please log in</body>\n</html>\n' }
  await kept(/no valid entries \(3 lines rejected\)/)
  reply = { status: 200, body: addresses(49).join('\n') }
  await kept(/49 entries, less than half of the 100/)
  t.equal(list.status().ageSeconds, 240)

  reply = { status: 200, body: addresses(150, 1000).join('\n') }
  clock += 500
  t.equal(await list.refresh(), true)
  t.strictSame(events.pop(), { type: 'loaded', name: 'proxies', entries: 150, rejected: 0 })
  t.strictSame(list.status(), { name: 'proxies', entries: 150, loadedAt: '2024-05-01T10:04:00.500Z', ageSeconds: 0, lastError: null })
  t.notOk(list.has(addresses(1)[0] as string), 'the old entries are gone')
  t.ok(list.has(addresses(1, 1000)[0] as string))
  clock += 59_999
  t.equal(list.status().ageSeconds, 59)

  // Exactly half is not "more than half".
  reply = { status: 200, body: addresses(75).join('\n') }
  t.equal(await list.refresh(), true)
  t.equal(list.status().entries, 75)
})

t.test('concurrent refreshes share one read', async (t) => {
  const server = await serve((_request, response) => { setTimeout(() => response.end(addresses(10).join('\n')), 20) })
  t.teardown(server.close)
  const list = new BlockList({ name: 'shared', sources: [`${server.url}/list`], refreshMs: 3_600_000 })
  const first = list.refresh()
  t.equal(list.refresh(), first)
  t.equal(await first, true)
  t.equal(server.requests(), 1)
  t.equal(list.status().entries, 10)
  t.equal(await list.refresh(), true, 'a later call reads again')
  t.equal(server.requests(), 2)
})

t.test('a refresh that times out keeps the list', async (t) => {
  let hang = false
  const server = await serve((_request, response) => { if (!hang) response.end(addresses(20).join('\n')) })
  t.teardown(server.close)
  const events: BlockListEvent[] = []
  const list = new BlockList({ name: 'tor', sources: [`${server.url}/exits`], refreshMs: 3_600_000, timeoutMs: 100, onEvent: (event) => events.push(event) })
  await list.load()
  hang = true
  t.equal(await list.refresh(), false)
  t.strictSame(events.pop(), { type: 'kept', name: 'tor', reason: `${server.url}/exits: timed out after 100 ms` })
  t.equal(list.status().entries, 20)
  t.ok(list.has(addresses(20)[19] as string))
})

t.test('load fails loudly, naming the list and the source', async (t) => {
  const dir = t.testdir({ 'good.txt': '1.2.3.4\n' })
  const list = new BlockList({ name: 'tenant:acme', sources: [join(dir, 'good.txt'), join(dir, 'absent.txt')], refreshMs: 60_000 })
  await t.rejects(list.load(), /^block list "tenant:acme": .*absent\.txt: ENOENT/)
  t.notOk(list.has('1.2.3.4'), 'a partial read installs nothing')
  t.match(list.status(), { entries: 0, loadedAt: null, lastError: /absent\.txt/ })
})

t.test('the constructor refuses unusable options', async (t) => {
  t.throws(() => new BlockList({ name: 'x', sources: [], refreshMs: 1000 }), TypeError)
  for (const refreshMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31]) {
    t.throws(() => new BlockList({ name: 'x', sources: ['a.txt'], refreshMs }), RangeError, String(refreshMs))
  }
})

t.test('start() refreshes on a timer; failures and listener errors stay inside', async (t) => {
  const dir = t.testdir({ 'list.txt': addresses(2).join('\n') })
  const file = join(dir, 'list.txt')
  const events: BlockListEvent[] = []
  const list = new BlockList({
    name: 'timer',
    sources: [file],
    refreshMs: 20,
    onEvent: (event) => {
      events.push(event)
      throw new Error('a broken listener')
    }
  })
  await list.load()
  t.equal(events.length, 1)
  list.start()
  list.start()
  t.teardown(() => list.stop())

  await writeFile(file, addresses(3, 100).join('\n'))
  await until(() => list.has(addresses(1, 100)[0] as string), 'the timer to pick up the new file')
  t.equal(list.status().entries, 3)

  await unlink(file)
  await until(() => events.some((event) => event.type === 'kept'), 'a failed timer refresh')
  t.match(events.find((event) => event.type === 'kept'), { reason: /list\.txt: .*ENOENT/ })
  t.equal(list.status().entries, 3, 'kept')
})

t.test('stop() ends the refreshes, also during one; two start() calls are one timer', async (t) => {
  const dir = t.testdir({ 'list.txt': addresses(2).join('\n') })
  const list = new BlockList({ name: 'timer', sources: [join(dir, 'list.txt')], refreshMs: 60_000 })
  await list.load()
  // Every refresh the timer starts, seen the moment it fires.
  const started: Array<Promise<boolean>> = []
  const refresh = list.refresh.bind(list)
  list.refresh = () => {
    const running = refresh()
    started.push(running)
    return running
  }
  // setTimeout runs on the test's clock (node:test's MockTimers) meanwhile, so a refresh that
  // must not happen is seen not to happen, rather than not to have happened yet.
  mock.timers.enable({ apis: ['setTimeout'] })
  try {
    list.start()
    list.start()
    mock.timers.tick(59_999)
    t.equal(started.length, 0, 'nothing before refreshMs')
    mock.timers.tick(1)
    t.equal(started.length, 1, 'one refresh at refreshMs, however often start() was called')
    // The next timer is set once the refresh is done.
    await started[0]
    mock.timers.tick(60_000)
    t.equal(started.length, 2, 'the next one refreshMs later')

    list.stop()
    await started[1]
    mock.timers.tick(10 * 60_000)
    t.equal(started.length, 2, 'stop() during a refresh: no refresh after it')

    list.start()
    mock.timers.tick(60_000)
    t.equal(started.length, 3, 'start() again resumes')
    await started[2]
    list.stop()
    mock.timers.tick(10 * 60_000)
    t.equal(started.length, 3, 'stop() between refreshes: no refresh after it')
  } finally {
    list.stop()
    mock.timers.reset()
  }
})
