/*
 * One tenant floods the embedded default (the real server process, in-memory stores) with
 * 200,000 requests, each naming a fresh End-User-IP through its secret keys: junk verifies,
 * sandbox dispatches to fresh addresses with a wrong guess each, and sandbox dispatches left
 * outstanding until its own token cap refuses them. Each creates new per-source, per-recipient,
 * mailbox, lockout, token and sandbox-inbox entries, twice as many as the single in-process
 * table of 100,000 that every tenant used to share. Another tenant's recipient limit,
 * per-source count, run of wrong guesses, lock and outstanding code must come out intact, and
 * its dispatches must not meet the flooder's token cap.
 */
import { writeFileSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { TEST_HMAC_KEYS } from '../helper.js'
import { send } from '../support/http.js'
import { startServer } from '../support/service-process.js'

const CONNECTIONS = 16
const JUNK_VERIFIES = 120_000
const GUESSED_DISPATCHES = 20_000
const OUTSTANDING_DISPATCHES = 40_000
/** The flooder's sandbox scope holds this many codes; the rest of its outstanding dispatches are refused. */
const TOKENS_PER_SCOPE = 25_000

/** A distinct public-looking address per request: 11.0.0.1, 11.0.0.2, … */
function freshAddress (n: number): string {
  return `11.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`
}

t.test('200,000 requests with fresh End-User-IPs through one tenant leave another tenant\'s limits, lockouts and codes intact', async (t) => {
  const keys = { flooderLive: generateKey('secret', 'live'), flooderTest: generateKey('secret', 'test'), victimLive: generateKey('secret', 'live'), victimPage: generateKey('restricted', 'live') }
  const huge = { source: '10000000/1h', backend: '10000000/1h', key: '10000000/1h', recipient: '10000000/1h' }
  const file: TenantsFile = {
    tiers: { standard: { allowance: 1_000_000, window: '1d', sandboxAllowance: 1_000_000 } },
    tenants: [
      {
        id: 'flooder',
        tier: 'standard',
        limits: huge,
        keys: [
          { id: 'flooder_live', kind: 'secret', mode: 'live', sha256: hashKey(keys.flooderLive) },
          { id: 'flooder_test', kind: 'secret', mode: 'test', sha256: hashKey(keys.flooderTest) }
        ]
      },
      {
        id: 'victim',
        tier: 'standard',
        keys: [
          { id: 'victim_live', kind: 'secret', mode: 'live', sha256: hashKey(keys.victimLive) },
          { id: 'victim_page', kind: 'restricted', mode: 'live', sha256: hashKey(keys.victimPage), origins: ['app.victim.test'] }
        ]
      }
    ]
  }
  t.testdir({})
  const tenantsPath = join(t.testdirName, 'tenants.json')
  writeFileSync(tenantsPath, JSON.stringify(file))
  // The victim's limits: 3 codes per recipient in 15 min, 5 requests per source an hour, 3 wrong guesses lock for an hour.
  const victimLimits = { RATE_LIMIT_RECIPIENT: '3/15m', RATE_LIMIT_SOURCE: '5/1h', RATE_LIMIT_MAILBOX: '15/15m', LOCKOUT_THRESHOLD: '3', LOCKOUT_DURATION: '1h' }
  const server = await startServer(t, { TENANTS_FILE: tenantsPath, OTP_HMAC_KEYS: TEST_HMAC_KEYS, LOG_LEVEL: 'error', MEMORY_STORE_MAX_TOKENS: String(TOKENS_PER_SCOPE), ...victimLimits })
  const port = Number(new URL(server.base).port)
  // The victim's backend names a new end user each time, so only the page's source nears its limit.
  let endUsers = 0
  const victim = async (path: string, body: unknown, key = keys.victimLive, localAddress = '127.0.0.90') => await send({
    port,
    localAddress,
    path,
    headers: {
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
      ...(key === keys.victimPage ? { origin: 'https://app.victim.test' } : { 'end-user-ip': `198.51.100.${++endUsers}` })
    },
    body: JSON.stringify(body)
  })
  /**
   * The code of the message `mail` sent to `email`, read back from the log mailer's output (the
   * service's stdout), which may reach the pipe after the answer: polled until it is there.
   */
  const codeFor = async (email: string, mail: number): Promise<string> => {
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20)) {
      const blocks = server.output().split('----- email-otp log mailer').filter((block) => block.includes(`To: ${email}\n`))
      const code = blocks.length >= mail ? /\b(\d{6})\b/.exec(blocks[mail - 1] ?? '')?.[1] : undefined
      if (code !== undefined) return code
    }
    throw new Error(`no mail ${mail} to ${email}`)
  }
  const sentTo = new Map<string, number>()
  const askCode = async (email: string): Promise<{ requestId: string, code: string }> => {
    const answer = await victim('/otp/request', { email })
    t.equal(answer.status, 200, `a code for ${email}`)
    const mail = (sentTo.get(email) ?? 0) + 1
    sentTo.set(email, mail)
    return { requestId: answer.body.data.requestId, code: await codeFor(email, mail) }
  }
  const wrong = (code: string): string => String((Number(code) + 1) % 1_000_000).padStart(6, '0')

  // The victim's state before the flood.
  await askCode('limited@victim.test')
  await askCode('limited@victim.test')
  for (let i = 0; i < 4; i++) t.equal((await victim('/otp/verify', { requestId: `otp_junk_${i}`, userGuess: '123456' }, keys.victimPage, '127.0.0.91')).status, 400, 'the page\'s source counts')
  for (let i = 0; i < 2; i++) {
    const { requestId, code } = await askCode('running@victim.test')
    t.equal((await victim('/otp/verify', { requestId, userGuess: wrong(code) })).status, 400, 'a run of wrong guesses')
  }
  for (let i = 0; i < 3; i++) {
    const { requestId, code } = await askCode('locked@victim.test')
    await victim('/otp/verify', { requestId, userGuess: wrong(code) })
  }
  t.equal((await victim('/otp/request', { email: 'locked@victim.test' })).status, 429, 'a locked mailbox')
  const outstanding = await askCode('outstanding@victim.test')

  // The flood: one keep-alive pool from the flooder's backend, each request from a fresh end user.
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
  t.teardown(() => { agent.destroy() })
  const post = async (key: string, path: string, body: unknown, endUser: string): Promise<{ status: number, body: any }> => await new Promise((resolve, reject) => {
    const payload = JSON.stringify(body)
    const outgoing = request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path,
      agent,
      localAddress: '127.0.0.95',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), 'end-user-ip': endUser }
    }, (response) => {
      let text = ''
      response.on('data', (chunk: Buffer) => { text += chunk.toString() })
      response.on('end', () => { resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) }) })
    })
    outgoing.on('error', reject)
    outgoing.end(payload)
  })
  const statuses = new Map<string, number>()
  const count = (what: string, status: number): void => { statuses.set(`${what} ${status}`, (statuses.get(`${what} ${status}`) ?? 0) + 1) }
  /** Runs `work` for n = from … to - 1 over the connection pool. */
  const phase = async (from: number, to: number, work: (n: number) => Promise<void>): Promise<void> => {
    let next = from
    await Promise.all(Array.from({ length: CONNECTIONS }, async () => {
      for (let n = next++; n < to; n = next++) await work(n)
    }))
  }
  const guessedFrom = JUNK_VERIFIES
  const outstandingFrom = guessedFrom + GUESSED_DISPATCHES
  const total = outstandingFrom + OUTSTANDING_DISPATCHES
  const started = Date.now()
  await phase(0, guessedFrom, async (n) => {
    count('junk verify', (await post(keys.flooderLive, '/otp/verify', { requestId: `otp_flood_${n}`, userGuess: '123456' }, freshAddress(n))).status)
  })
  await phase(guessedFrom, outstandingFrom, async (n) => {
    const sent = await post(keys.flooderTest, '/otp/request', { email: `guessed${n}@flood.example` }, freshAddress(n))
    count('dispatch', sent.status)
    if (sent.status === 200) count('wrong guess', (await post(keys.flooderTest, '/otp/verify', { requestId: sent.body.data.requestId, userGuess: '000000' }, freshAddress(n + total))).status)
  })
  await phase(outstandingFrom, total, async (n) => {
    count('outstanding dispatch', (await post(keys.flooderTest, '/otp/request', { email: `kept${n}@flood.example` }, freshAddress(n))).status)
  })
  const sent = [...statuses.values()].reduce((sum, value) => sum + value, 0)
  t.comment(`flood: ${sent} requests in ${((Date.now() - started) / 1000).toFixed(0)} s: ${[...statuses].map(([what, value]) => `${value} × ${what}`).join(', ')}`)
  t.ok(sent >= 200_000, 'two hundred thousand requests, each with a fresh End-User-IP')
  t.equal(statuses.get('junk verify 400'), JUNK_VERIFIES, 'every junk verify was answered')
  t.equal(statuses.get('dispatch 200'), GUESSED_DISPATCHES, 'every guessed dispatch sent its code')
  t.equal(statuses.get('wrong guess 400'), GUESSED_DISPATCHES, 'and met its wrong guess')
  t.equal(statuses.get('outstanding dispatch 200'), TOKENS_PER_SCOPE, 'the flooder\'s sandbox holds its cap of codes…')
  t.equal(statuses.get('outstanding dispatch 503'), OUTSTANDING_DISPATCHES - TOKENS_PER_SCOPE, '…and its further dispatches are its own 503s')

  // The victim's state after it.
  t.equal((await victim('/otp/request', { email: 'limited@victim.test' })).status, 200, 'the recipient\'s third code of the window')
  t.equal((await victim('/otp/request', { email: 'limited@victim.test' })).status, 429, 'its fourth: the recipient limit kept its count')
  t.equal((await victim('/otp/verify', { requestId: 'otp_junk_4', userGuess: '123456' }, keys.victimPage, '127.0.0.91')).status, 400, 'the page\'s fifth request of the hour')
  t.equal((await victim('/otp/verify', { requestId: 'otp_junk_5', userGuess: '123456' }, keys.victimPage, '127.0.0.91')).status, 429, 'its sixth: the per-source count survived')
  const third = await askCode('running@victim.test')
  await victim('/otp/verify', { requestId: third.requestId, userGuess: wrong(third.code) })
  t.equal((await victim('/otp/request', { email: 'running@victim.test' })).status, 429, 'the third wrong guess locks: the run of two survived')
  const stillLocked = await victim('/otp/request', { email: 'locked@victim.test' })
  t.ok(stillLocked.status === 429 && Number(stillLocked.headers['retry-after']) > 3000, 'the lock survived')
  t.equal((await victim('/otp/verify', { requestId: outstanding.requestId, userGuess: outstanding.code })).status, 200, 'the outstanding code verifies')
  t.equal((await victim('/otp/request', { email: 'after@victim.test' })).status, 200, 'and the flooder\'s full token store is not the victim\'s')
})
