import t from 'tap'
import { bearer, buildApp } from '../helper.js'
import { DEMO_SANDBOX_KEY } from '../../lib/tenants-file/demo.js'

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
