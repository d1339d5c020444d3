import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { request } from 'node:http'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { startExample } from '../support/example-process.js'
import { sandboxCode, wrongGuess } from '../support/sandbox.js'
import { killOnExit } from '../support/processes.js'
import { freePort } from '../support/redis.js'
import { startServer } from '../support/service-process.js'
import { until } from '../support/wait.js'

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: any }

/** A JSON POST from a chosen loopback address, as one end user of the backend would send it (with the cookie its browser holds). */
async function postFrom (localAddress: string, url: string, body: unknown, cookie?: string): Promise<Answer> {
  return await new Promise((resolve, reject) => {
    const outgoing = request(url, { method: 'POST', localAddress, headers: { 'content-type': 'application/json', ...(cookie === undefined ? {} : { cookie }) } }, (incoming) => {
      let text = ''
      incoming.setEncoding('utf8')
      incoming.on('data', (chunk: string) => { text += chunk })
      incoming.on('end', () => { resolve({ status: incoming.statusCode ?? 0, headers: incoming.headers, body: JSON.parse(text) }) })
    })
    outgoing.on('error', reject)
    outgoing.end(JSON.stringify(body))
  })
}

t.test('the backend example signs users up through the service, each end user counted on its own', async (t) => {
  // Four requests a minute per source: a backend that did not forward End-User-IP would be
  // one source, and its users would share those four.
  const service = await startServer(t, { RATE_LIMIT_SOURCE: '4/1m' })
  const backend = await startExample(t, 'backend/server.ts', { EMAIL_OTP_URL: service.base, EMAIL_OTP_KEY: DEMO_SANDBOX_KEY })
  const ada = 'ada.backend@example.com'
  // One browser per end-user address, holding the session cookie the backend set.
  const jars = new Map<string, string>()
  const start = async (from: string, email: string): Promise<Answer> => {
    const answer = await postFrom(from, `${backend.base}/signup/start`, { email }, jars.get(from))
    const set = answer.headers['set-cookie']?.[0]
    if (set !== undefined) jars.set(from, set.split(';')[0] ?? '')
    return answer
  }
  const finish = async (from: string, requestId: string, code: string): Promise<Answer> => await postFrom(from, `${backend.base}/signup/finish`, { requestId, code }, jars.get(from))

  const started = await start('127.0.0.2', ada)
  t.equal(started.status, 200)
  t.match(started.body.requestId, /^otp_/)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, ada, started.body.requestId)
  t.match(jars.get('127.0.0.2'), /^signup_session=[A-Za-z0-9_-]{43}$/, 'the browser holds a sign-up session')
  t.same(await finish('127.0.0.2', started.body.requestId, code).then((answer) => [answer.status, answer.body]), [200, { verified: true, email: ada }], 'the right code signs up the address the sign-up was started for')
  t.same(await finish('127.0.0.2', started.body.requestId, code).then((answer) => [answer.status, answer.body.error]), [400, 'UNKNOWN_SIGNUP'], 'once')

  const second = await start('127.0.0.2', ada)
  const secondCode = await sandboxCode(service.base, DEMO_SANDBOX_KEY, ada, second.body.requestId)
  const wrong = await finish('127.0.0.2', second.body.requestId, wrongGuess(secondCode))
  t.same([wrong.status, wrong.body.error], [400, 'CODE_MISMATCH'], 'a wrong code is the user\'s to fix')
  t.match(wrong.body.message, /incorrect/)

  const limited = await start('127.0.0.2', 'ada.again@example.com')
  t.same([limited.status, limited.body.error], [429, 'RATE_LIMITED'], 'the fifth request of this end user')
  t.match(limited.headers['retry-after'], /^\d+$/, 'with Retry-After passed on')

  const other = await start('127.0.0.3', 'bob.backend@example.com')
  t.equal(other.status, 200, 'another end user of the same backend is not limited')
  const invalid = await start('127.0.0.3', 'not an address')
  t.same([invalid.status, invalid.body.error], [400, 'INVALID_EMAIL'])
  const missing = await postFrom('127.0.0.3', `${backend.base}/signup/start`, {})
  t.same([missing.status, missing.body.error], [400, 'INVALID_REQUEST'], 'the example checks its own body')
})

t.test('the backend example hides the service\'s trouble from its users and logs it', async (t) => {
  const service = await startServer(t, {})
  const backend = await startExample(t, 'backend/server.ts', { EMAIL_OTP_URL: service.base, EMAIL_OTP_KEY: 'sk_test_RevokedOrMistyped' })
  const answer = await postFrom('127.0.0.1', `${backend.base}/signup/start`, { email: 'ada@example.com' })
  t.same([answer.status, answer.body.error], [503, 'VERIFICATION_UNAVAILABLE'])
  await backend.waitFor(/"code":"UNAUTHORIZED"/)
  t.match(backend.output(), /"msg":"email-otp call failed"/, 'the operator sees why')
})

t.test('the backend example proves only the address its own session started: no other requestId, no other session', async (t) => {
  const service = await startServer(t, {})
  const backend = await startExample(t, 'backend/server.ts', { EMAIL_OTP_URL: service.base, EMAIL_OTP_KEY: DEMO_SANDBOX_KEY })
  const victim = 'victim.backend@example.com'
  const started = await postFrom('127.0.0.1', `${backend.base}/signup/start`, { email: victim })
  const cookie = (started.headers['set-cookie']?.[0] ?? '').split(';')[0] ?? ''
  t.match(started.headers['set-cookie']?.[0], /; Path=\/signup; HttpOnly; SameSite=Strict$/)

  // Mallory proves her own mailbox with the service directly, then presents that requestId.
  const own = await fetch(`${service.base}/otp/request`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_SANDBOX_KEY}`, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'mallory@example.com' }) })
  const ownRequestId = ((await own.json()) as { data: { requestId: string } }).data.requestId
  const ownCode = await sandboxCode(service.base, DEMO_SANDBOX_KEY, 'mallory@example.com', ownRequestId)
  const foreign = await postFrom('127.0.0.1', `${backend.base}/signup/finish`, { requestId: ownRequestId, code: ownCode }, cookie)
  t.same([foreign.status, foreign.body.error], [400, 'UNKNOWN_SIGNUP'], 'a requestId the backend did not issue proves nothing')

  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, victim, started.body.requestId)
  const otherSession = await postFrom('127.0.0.1', `${backend.base}/signup/finish`, { requestId: started.body.requestId, code })
  t.same([otherSession.status, otherSession.body.error], [400, 'UNKNOWN_SIGNUP'], 'without the session that started it')
  const forged = await postFrom('127.0.0.1', `${backend.base}/signup/finish`, { requestId: started.body.requestId, code }, 'signup_session=' + 'A'.repeat(43))
  t.same([forged.status, forged.body.error], [400, 'UNKNOWN_SIGNUP'], 'nor with another session')
  const mine = await postFrom('127.0.0.1', `${backend.base}/signup/finish`, { requestId: started.body.requestId, code }, cookie)
  t.same([mine.status, mine.body], [200, { verified: true, email: victim }], 'the session that started it, with the code, proves that address')
})

t.test('the examples close on SIGTERM and SIGINT, and npx tsx leaves no process behind', async (t) => {
  const service = await startServer(t, {})
  const backend = await startExample(t, 'backend/server.ts', { EMAIL_OTP_URL: service.base, EMAIL_OTP_KEY: DEMO_SANDBOX_KEY })
  const stopped = once(backend.child, 'exit')
  backend.child.kill('SIGTERM')
  t.same(await stopped, [0, null], 'the backend closes its server and exits 0')
  const page = await startExample(t, 'browser/serve.js', {})
  const pageStopped = once(page.child, 'exit')
  page.child.kill('SIGINT')
  t.same(await pageStopped, [0, null], 'the page server too')

  // Ctrl-C in a terminal: SIGINT to the whole foreground group (npm exec, tsx, the example).
  const port = await freePort()
  const group = killOnExit(spawn('npx', ['tsx', 'examples/backend/server.ts'], { cwd: new URL('../..', import.meta.url).pathname, env: { PATH: process.env.PATH ?? '', PORT: String(port), EMAIL_OTP_URL: service.base }, stdio: 'ignore', detached: true }), true)
  const groupExited = once(group, 'exit')
  t.teardown(() => { if (groupAlive(group.pid ?? 0)) process.kill(-(group.pid ?? 0), 'SIGKILL') })
  await until('npx tsx examples/backend/server.ts to answer', async () => await fetch(`http://127.0.0.1:${port}/`).then(() => true, () => false), 60_000)
  process.kill(-(group.pid ?? 0), 'SIGINT')
  await groupExited
  await until('every process of the group to end', () => !groupAlive(group.pid ?? 0), 20_000)
  t.equal(await fetch(`http://127.0.0.1:${port}/`).then(() => 'listening', () => 'closed'), 'closed', 'nothing listens any more')
})

/** Whether any process of the group is still running. */
function groupAlive (pgid: number): boolean {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}
