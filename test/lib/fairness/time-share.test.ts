import t from 'tap'
import { TenantTimeShare } from '../../../lib/fairness/time-share.js'

t.test('one turn at a time per tenant, charged what it took, within a share of the time', async (t) => {
  let now = 0
  const share = new TenantTimeShare(0.25, 50, () => now)
  const first = share.acquire('acme')
  if (!('release' in first)) throw new Error('the first turn is granted')
  t.same(share.acquire('acme'), { retryInMs: 0 }, 'a second turn while the first runs is refused')
  t.ok('release' in share.acquire('globex'), 'another tenant is not affected')

  now = 10
  first.release(10)
  const second = share.acquire('acme')
  if (!('release' in second)) throw new Error('within the burst, the next turn at once')
  // 50 (full: it grows no further) − 10 spent = 40 ms left; a turn of 80 ms (its credit full
  // again meanwhile) leaves −30, paid back at a quarter of the time: 120 ms.
  now = 90
  second.release(80)
  t.same(share.acquire('acme'), { retryInMs: 120 }, 'a spent credit: told when it is paid back')
  now = 209
  t.notOk('release' in share.acquire('acme'), 'not before')
  now = 211
  t.ok('release' in share.acquire('acme'), 'and then granted')
})

t.test('a tenant asking without pause gets at most its share of the time', async (t) => {
  let now = 0
  const share = new TenantTimeShare(0.25, 50, () => now)
  let worked = 0
  for (; now < 10_000; now += 1) {
    const turn = share.acquire('acme')
    if (!('release' in turn)) continue
    // Each turn takes 20 ms of work.
    now += 20
    worked += 20
    turn.release(20)
  }
  t.ok(worked <= 0.25 * 10_000 + 50 + 20, `${worked} ms of work in 10 s: a quarter, plus the burst and one turn`)
  t.ok(worked >= 0.25 * 10_000 - 20, 'and it does get its share')
  const refused = share.acquire('acme')
  t.ok(!('release' in refused) && refused.retryInMs > 0 && refused.retryInMs <= 20 / 0.25, `told when to come back (${JSON.stringify(refused)})`)
})

t.test('a turn released twice is charged once', async (t) => {
  const share = new TenantTimeShare(0.25, 50, () => 0)
  const turn = share.acquire('acme')
  if (!('release' in turn)) throw new Error('granted')
  turn.release(40)
  turn.release(40)
  t.ok('release' in share.acquire('acme'), 'credit left: 10 ms')
})
