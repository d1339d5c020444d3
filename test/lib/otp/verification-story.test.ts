import t from 'tap'
import { VerificationStories } from '../../../lib/otp/verification-story.js'
import { MemoryVerificationLog } from '../../../lib/state/memory/verification-log.js'
import { LISTED_PER_TYPE, type LaterEvent } from '../../../lib/state/verification-log.js'

const created = Date.parse('2026-01-01T00:00:00.000Z')
const expiresAt = '2026-01-01T00:10:00.000Z'
const at = '2026-01-01T00:01:00.000Z'

/** The state a story of these events (after requested) is read in, at `nowMs`. */
async function stateOf (events: LaterEvent[], nowMs = created + 60_000): Promise<unknown> {
  const log = new MemoryVerificationLog({ retentionMs: 86_400_000, maxPerScope: 10 }, { now: () => created })
  const id = { tenantId: 'acme', mode: 'live' as const, requestId: 'otp_a' }
  log.start(id, 'backend', { type: 'requested', at: new Date(created).toISOString(), keyId: 'k', expiresAt })
  for (const event of events) log.record(id, event)
  return (await new VerificationStories(log).story('acme', 'live', 'otp_a', nowMs))?.state
}

t.test('the state a story is read in', async (t) => {
  const sent: LaterEvent = { type: 'sent', at, provider: 'ses' }
  const wrong: LaterEvent = { type: 'wrong_guess', at, reason: 'wrong_code' }
  t.equal(await stateOf([sent]), 'pending')
  t.equal(await stateOf([sent], Date.parse(expiresAt) - 1), 'pending', 'the last millisecond of its lifetime')
  t.equal(await stateOf([sent], Date.parse(expiresAt)), 'expired', 'at expiresAt')
  t.equal(await stateOf([sent, wrong], Date.parse(expiresAt) + 1), 'failed', 'a used code does not expire')
  t.equal(await stateOf([sent, wrong, { type: 'locked', at }]), 'locked')
  t.equal(await stateOf([{ type: 'delivery_failed', at, reason: 'rejected' }], Date.parse(expiresAt) + 1), 'delivery_failed')
  t.equal(await stateOf([sent, { type: 'verified', at }, wrong], Date.parse(expiresAt) + 1), 'verified', 'a guess after the right one changes nothing')
  t.equal(await stateOf([sent, { type: 'bounced', at, bounceType: 'permanent' }]), 'pending', 'feedback tells what the mail did, not the code')
})

t.test('an expired story ends with expired at expiresAt; past their bound delays are counted', async (t) => {
  const log = new MemoryVerificationLog({ retentionMs: 86_400_000, maxPerScope: 10 }, { now: () => created })
  const id = { tenantId: 'acme', mode: 'live' as const, requestId: 'otp_b' }
  log.start(id, 'backend', { type: 'requested', at: new Date(created).toISOString(), keyId: 'k', expiresAt })
  for (let i = 0; i < 40; i++) log.record(id, { type: 'delayed', at })
  const story = await new VerificationStories(log).story('acme', 'live', 'otp_b', Date.parse(expiresAt) + 1)
  t.equal(story?.state, 'expired')
  t.strictSame(story?.events.at(-1), { type: 'expired', at: expiresAt })
  t.equal(story?.events.length, 1 + LISTED_PER_TYPE.delayed + 1, 'requested, the delays listed, then expired')
  t.equal(story?.eventsOmitted, 40 - LISTED_PER_TYPE.delayed)
  t.equal(await new VerificationStories(log).story('acme', 'test', 'otp_b'), null, 'not in the other mode')
})
