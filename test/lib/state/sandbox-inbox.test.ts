import t from 'tap'
import { MemorySandboxInbox } from '../../../lib/state/memory/sandbox-inbox.js'
import type { SandboxMessage } from '../../../lib/state/sandbox-inbox.js'

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
