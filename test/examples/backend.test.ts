import t from 'tap'
import { request } from 'node:http'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants/registry.js'
import { startExample } from '../support/example-process.js'
import { sandboxCode, wrongGuess } from '../support/sandbox.js'
import { startServer } from '../support/service-process.js'

interface Answer { status: number, headers: Record<string, string | string[] | undefined>, body: any }

/** A JSON POST from a chosen loopback address, as one end user of the backend would send it. */
async function postFrom (localAddress: string, url: string, body: unknown): Promise<Answer> {
  return await new Promise((resolve, reject) => {
    const outgoing = request(url, { method: 'POST', localAddress, headers: { 'content-type': 'application/json' } }, (incoming) => {
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
  const start = async (from: string, email: string): Promise<Answer> => await postFrom(from, `${backend.base}/signup/start`, { email })
  const finish = async (from: string, requestId: string, code: string): Promise<Answer> => await postFrom(from, `${backend.base}/signup/finish`, { requestId, code })

  const started = await start('127.0.0.2', ada)
  t.equal(started.status, 200)
  t.match(started.body.requestId, /^otp_/)
  const code = await sandboxCode(service.base, DEMO_SANDBOX_KEY, ada, started.body.requestId)
  t.same(await finish('127.0.0.2', started.body.requestId, code).then((answer) => [answer.status, answer.body]), [200, { verified: true }], 'the right code signs the user up')

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
