import t from 'tap'
import { ConfigError, parseConfig, parseRedisToolConfig } from '../../../lib/config/from-env.js'

t.test('the reputation guard: documented defaults, off, and bad values refused by name', async (t) => {
  t.same(parseConfig({}).reputation, { bounceRate: 0.04, complaintRate: 0.0008, minSends: 200, windowMs: 86_400_000, windowSpec: '24h' })
  t.same(parseConfig({ REPUTATION_BOUNCE_RATE: 'off', REPUTATION_WINDOW: '7d' }).reputation, { bounceRate: null, complaintRate: 0.0008, minSends: 200, windowMs: 7 * 86_400_000, windowSpec: '7d' })
  t.equal(parseConfig({ REPUTATION_BOUNCE_RATE: 'off', REPUTATION_COMPLAINT_RATE: 'off' }).reputation, null, 'both off: the guard is off')
  const refused = (env: Record<string, string>): string => {
    try {
      parseConfig(env)
    } catch (error) {
      if (error instanceof ConfigError) return error.message
      throw error
    }
    return 'accepted'
  }
  t.match(refused({ REPUTATION_BOUNCE_RATE: '0' }), /REPUTATION_BOUNCE_RATE must be a rate above 0 and below 1/)
  t.match(refused({ REPUTATION_COMPLAINT_RATE: '1' }), /REPUTATION_COMPLAINT_RATE must be a rate above 0 and below 1/)
  t.match(refused({ REPUTATION_BOUNCE_RATE: '4%' }), /REPUTATION_BOUNCE_RATE/)
  t.match(refused({ REPUTATION_WINDOW: '90m' }), /REPUTATION_WINDOW must be whole hours/)
  t.match(refused({ REPUTATION_WINDOW: '8d' }), /REPUTATION_WINDOW/)
  t.match(refused({ REPUTATION_MIN_SENDS: '0' }), /REPUTATION_MIN_SENDS/)
  t.equal(parseRedisToolConfig({ REPUTATION_WINDOW: '48h' }).reputationWindowMs, 2 * 86_400_000, 'the resume command forgets the window the service counts')
  t.throws(() => parseRedisToolConfig({ REPUTATION_WINDOW: '90m' }), ConfigError)
})
