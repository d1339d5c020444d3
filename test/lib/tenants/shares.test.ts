import { test } from 'tap'
import { EventLoopProbe, TenantShares, type LoadProbe } from '../../../lib/tenants/shares.js'

/** A probe the test sets: whether the event loop counts as busy. */
function probe (busy: boolean): LoadProbe & { busy: () => boolean, set: (value: boolean) => void } {
  let state = busy
  return { busy: () => state, set: (value) => { state = value } }
}

/** Enters and records when the request starts: at once (true) or later. */
function enter (shares: TenantShares, tenantId: string, started: string[], name: string): boolean {
  const wait = shares.enter(tenantId)
  if (wait === null) {
    started.push(name)
    return true
  }
  void wait.then(() => { started.push(name) })
  return false
}

const settle = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

test('on a busy loop, a tenant past its cap waits for one of its own while another tenant has requests', async (t) => {
  const shares = new TenantShares(2, probe(true))
  const started: string[] = []
  t.ok(enter(shares, 'calm', started, 'calm1'), 'the calm tenant starts')
  t.ok(enter(shares, 'noisy', started, 'noisy1'))
  t.ok(enter(shares, 'noisy', started, 'noisy2'), 'up to the cap at once')
  t.notOk(enter(shares, 'noisy', started, 'noisy3'), 'past the cap: waits')
  t.notOk(enter(shares, 'noisy', started, 'noisy4'))
  t.equal(shares.waiting, 2)
  t.ok(enter(shares, 'calm', started, 'calm2'), 'the calm tenant, below the cap, starts while the noisy one waits')
  t.notOk(enter(shares, 'calm', started, 'calm3'), 'past the cap, holding as many as the noisy tenant: waits too')
  shares.leave('calm')
  await settle()
  t.same(started, ['calm1', 'noisy1', 'noisy2', 'calm2', 'calm3'], 'a tenant\'s leave starts its own next request, not another tenant\'s')
  shares.leave('noisy')
  await settle()
  t.same(started.slice(5), ['noisy3'], 'in order of arrival')
  shares.leave('noisy')
  await settle()
  t.same(started.slice(6), ['noisy4'])
  t.equal(shares.waiting, 0)
})

test('a tenant alone, or a loop with time to spare, is never held', async (t) => {
  const load = probe(true)
  const shares = new TenantShares(1, load)
  const started: string[] = []
  for (let i = 0; i < 5; i++) t.ok(enter(shares, 'solo', started, `solo${i}`), 'alone on a busy loop: starts')
  t.ok(enter(shares, 'other', started, 'other0'))
  t.ok(enter(shares, 'other', started, 'other1'), 'past the cap with fewer in flight than another tenant: starts')
  t.notOk(enter(shares, 'solo', started, 'solo5'), 'the tenant holding the most, past the cap, on a busy loop: waits')
  t.notOk(enter(shares, 'solo', started, 'solo6'))
  load.set(false)
  t.ok(enter(shares, 'solo', started, 'solo7'), 'the loop has time: starts past the cap')
  shares.leave('solo')
  await settle()
  t.ok(started.includes('solo5') && started.includes('solo6'), 'the loop has time: one leave starts every waiting request')
  t.equal(shares.waiting, 0)
})

test('every place is given back: after all leave, nobody counts as in flight', async (t) => {
  const load = probe(true)
  const shares = new TenantShares(1, load)
  const started: string[] = []
  t.ok(enter(shares, 'a', started, 'a0'))
  t.ok(enter(shares, 'b', started, 'b0'))
  t.notOk(enter(shares, 'a', started, 'a1'))
  shares.leave('a')
  await settle()
  shares.leave('a')
  shares.leave('b')
  // Nothing in flight: a tenant alone again starts however many it sends.
  for (let i = 0; i < 3; i++) t.ok(enter(shares, 'b', started, `b${i + 1}`))
  t.equal(shares.waiting, 0)
})

test('the cap is a positive integer', async (t) => {
  t.throws(() => new TenantShares(0, probe(true)), RangeError)
  t.throws(() => new TenantShares(1.5, probe(true)), RangeError)
})

test('the event-loop probe tells a busy window from an idle one', async (t) => {
  const loop = new EventLoopProbe(0.5, 20)
  t.teardown(() => { loop.stop() })
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.notOk(loop.busy(), 'an idle loop is not busy')
  const end = performance.now() + 60
  while (performance.now() < end) { /* the loop is kept busy */ }
  await new Promise((resolve) => setTimeout(resolve, 1))
  t.ok(loop.busy(), 'a loop that just ran 60 ms without a pause is busy')
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.notOk(loop.busy(), 'idle again: not busy')
})
