import t from 'tap'
import { MemorySandboxInbox, type SandboxMessage } from '../../../lib/sandbox/inbox.js'

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
