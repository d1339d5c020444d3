import t from 'tap'
import { bearer, buildApp } from '../helper.js'
import { DEMO_RESTRICTED_KEY, DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'
import { listenApp, send } from '../support/http.js'

t.test('the sandbox inbox filtered by requestId', async (t) => {
  const { app } = await buildApp(t)
  const dispatch = async (): Promise<string> => (await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(DEMO_SANDBOX_KEY), payload: { email: 'ada@example.com' } })).json().data.requestId
  const first = await dispatch()
  const second = await dispatch()
  const list = async (query: string): Promise<{ status: number, body: any }> => {
    const answer = await app.inject({ method: 'GET', url: `/sandbox/messages?${query}`, headers: bearer(DEMO_SANDBOX_KEY) })
    return { status: answer.statusCode, body: answer.json() }
  }
  const all = await list('email=ada@example.com')
  t.same(all.body.data.messages.map((message: { requestId: string }) => message.requestId), [second, first], 'without it: every message, newest first')
  const one = await list(`email=ada@example.com&requestId=${first}`)
  t.same(one.body.data.messages.map((message: { requestId: string }) => message.requestId), [first], 'with it: that dispatch\'s message only')
  t.match(one.body.data.messages[0].code, /^\d{6}$/)
  t.same((await list('email=ada@example.com&requestId=otp_unknown')).body.data.messages, [], 'an unknown requestId: none')
  const bad = await list('email=ada@example.com&requestId=not%20an%20id')
  t.same([bad.status, bad.body.code], [400, 'INVALID_BODY'])
})

t.test('a page\'s public sandbox key cannot read the inbox: 403 KEY_NOT_PERMITTED, nor the codes its backend requested', async (t) => {
  const { app } = await buildApp(t)
  const port = await listenApp(app)
  const origin = { origin: `http://127.0.0.1:${port}` }
  const backend = await send({ port, path: '/otp/request', headers: { ...bearer(DEMO_SANDBOX_KEY), 'content-type': 'application/json' }, body: JSON.stringify({ email: 'qa@example.com' }) })
  t.equal(backend.status, 200)
  const byPage = await send({ port, path: '/otp/request', localAddress: '127.0.0.2', headers: { ...bearer(DEMO_RESTRICTED_KEY), ...origin, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'visitor@example.com' }) })
  t.equal(byPage.status, 200, 'the page\'s key dispatches')
  for (const email of ['qa@example.com', 'visitor@example.com']) {
    const read = await send({ port, method: 'GET', path: `/sandbox/messages?email=${email}`, localAddress: '127.0.0.3', headers: { ...bearer(DEMO_RESTRICTED_KEY), ...origin } })
    t.same([read.status, read.body.code], [403, 'KEY_NOT_PERMITTED'], `${email}: refused, no message`)
    t.notOk(JSON.stringify(read.body).includes('"code":"0') || /\d{6}/.test(JSON.stringify(read.body)), 'no code in the answer')
  }
  const bySecret = await send({ port, method: 'GET', path: '/sandbox/messages?email=qa@example.com', headers: bearer(DEMO_SANDBOX_KEY) })
  t.equal(bySecret.status, 200, 'the backend\'s secret sandbox key still reads it')
  t.equal(bySecret.body.data.messages.length, 1)
})
