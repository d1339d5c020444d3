import { setImmediate as nextTurn } from 'node:timers/promises'
import t from 'tap'
import { TenantRequestTurns, type RequestTurnsOptions } from '../../../lib/fairness/request-turns.js'

const OPTIONS: RequestTurnsOptions = { quantumMs: 2, busyShare: 0.5, busyWindowMs: 20, maxWaitMs: 5, presenceWindowMs: 1000 }

/**
 * Turns on a loop clock the test moves: a request that goes on works `costMs` (the wall clock
 * and the loop's active time both move); `idle` moves the wall clock alone, as a loop waiting
 * for I/O. A request stays in the service until the test lets it leave (the oldest first).
 */
function requestTurns (options: Partial<RequestTurnsOptions> = {}): {
  turns: TenantRequestTurns
  log: string[]
  enter: (tenant: string, name: string, costMs?: number) => Promise<void>
  leave: (tenant: string, count?: number) => void
  idle: (ms: number) => void
  busy: (ms: number) => void
} {
  const clock = { wall: 0, active: 0 }
  const log: string[] = []
  const turns = new TenantRequestTurns({ ...OPTIONS, ...options }, { now: () => clock.wall, activeMs: () => clock.active })
  /** Each tenant's requests in the order they entered, by what counts them out. */
  const inService = new Map<string, Array<() => void>>()
  const busy = (ms: number): void => {
    clock.wall += ms
    clock.active += ms
  }
  return {
    turns,
    log,
    enter: async (tenant, name, costMs = 0.1) => {
      await new Promise<void>((resolve) => {
        const leave = turns.enter(tenant, () => {
          busy(costMs)
          log.push(name)
          resolve()
        })
        inService.set(tenant, [...inService.get(tenant) ?? [], leave])
      })
    },
    leave: (tenant, count = 1) => { for (const leave of inService.get(tenant)?.splice(0, count) ?? []) leave() },
    idle: (ms) => { clock.wall += ms },
    busy
  }
}

/**
 * A calm tenant seen lately (one request in the service for 50 ms, then answered) and a noisy
 * one holding `held` requests in the service for a second: the noisy tenant is heavy.
 */
async function calmAndNoisy (turns: ReturnType<typeof requestTurns>, held = 30): Promise<void> {
  const { enter, leave, idle } = turns
  await enter('calm', 'warm-calm')
  idle(50)
  leave('calm')
  for (let index = 0; index < held; index++) await enter('noisy', `held${index}`)
  idle(1000)
  await nextTurn()
  turns.log.length = 0
}

/**
 * Two heavy tenants, acme and globex, each holding 30 requests in the service for a second,
 * beside a calm tenant with one.
 */
async function twoHeavyTenants (turns: ReturnType<typeof requestTurns>): Promise<void> {
  const { enter, idle } = turns
  await enter('calm', 'warm-calm')
  for (let index = 0; index < 30; index++) await enter('acme', `acme-held${index}`)
  for (let index = 0; index < 30; index++) await enter('globex', `globex-held${index}`)
  idle(1000)
  await nextTurn()
  turns.log.length = 0
}

t.test('while the loop has time, every request goes on at once, in the caller\'s own turn', async (t) => {
  const { turns, log, enter } = requestTurns()
  const first = enter('acme', 'a0')
  t.same(log, ['a0'], 'went on before enter() returned')
  await first
  await enter('globex', 'g0')
  t.same(log, ['a0', 'g0'])
  t.equal(turns.waiting, 0)
})

t.test('a tenant alone is never held, however many requests it has in the service and however busy the loop', async (t) => {
  const { turns, log, enter, busy } = requestTurns()
  busy(100)
  // A full bucket at once, nothing answered yet, each request 0.5 ms: 15 ms in one turn.
  const all = Array.from({ length: 30 }, async (_, index) => { await enter('acme', `a${index}`, 0.5) })
  t.equal(log.length, 30, 'all thirty went on at once: there is nobody to be fair to')
  t.equal(turns.waiting, 0)
  await Promise.all(all)
})

t.test('past the quantum, a heavy tenant\'s requests wait and a light tenant\'s go on at once', async (t) => {
  const turns = requestTurns()
  const { log, enter } = turns
  await calmAndNoisy(turns)
  // The noisy tenant's next requests arrive together: the first spends the quantum.
  const noisy = Array.from({ length: 10 }, async (_, index) => { await enter('noisy', `n${index}`, 1) })
  t.same(log, ['n0', 'n1'], 'two went on (2 ms of the quantum), the rest wait')
  t.equal(turns.turns.waiting, 8)
  const calm = enter('calm', 'c0')
  t.same(log, ['n0', 'n1', 'c0'], 'the calm tenant\'s request went on at once, ahead of the eight waiting')
  await calm
  await Promise.all(noisy)
  t.equal(log.length, 11, 'every request went on')
})

t.test('a light tenant is remembered between its requests: the heavy one waits even when the light one has nothing in the service', async (t) => {
  const turns = requestTurns()
  const { log, enter } = turns
  await calmAndNoisy(turns)
  // The calm tenant's one request was answered a second ago; its average lingers.
  const noisy = Array.from({ length: 4 }, async (_, index) => { await enter('noisy', `n${index}`, 1) })
  t.same(log, ['n0', 'n1'], 'held past the quantum although the calm tenant has no request in the service now')
  await Promise.all(noisy)
})

t.test('a tenant gone long enough is forgotten: the other is alone again and never held', async (t) => {
  const turns = requestTurns()
  const { log, enter, idle } = turns
  await calmAndNoisy(turns)
  idle(10_000)
  const noisy = Array.from({ length: 10 }, async (_, index) => { await enter('noisy', `n${index}`, 1) })
  t.equal(log.length, 10, 'all went on at once: the calm tenant\'s presence faded')
  await Promise.all(noisy)
})

t.test('a tenant with one request in the service on average or less is never heavy', async (t) => {
  const { log, enter, leave, idle } = requestTurns()
  await enter('calm', 'warm-calm')
  idle(50)
  leave('calm')
  // One request at a time, answered at once: its average stays below one.
  for (let index = 0; index < 5; index++) {
    await enter('acme', `a${index}`, 1)
    idle(100)
    leave('acme')
  }
  t.same(log.slice(1), ['a0', 'a1', 'a2', 'a3', 'a4'])
})

t.test('heavy tenants waiting together take one request each in turn, then more in rounds while the turn is under the quantum', async (t) => {
  const turns = requestTurns()
  const { log, enter } = turns
  await twoHeavyTenants(turns)
  const first = enter('acme', 'first', 2)
  const waiting = [
    ...Array.from({ length: 6 }, async (_, index) => { await enter('acme', `a${index}`, 0.3) }),
    ...Array.from({ length: 6 }, async (_, index) => { await enter('globex', `g${index}`, 0.3) })
  ]
  t.same(log, ['first'], 'the quantum is spent')
  await nextTurn()
  t.same(log, ['first', 'a0', 'g0'], 'the turn had already worked its quantum: one round')
  await nextTurn()
  t.same(log.slice(3), ['a1', 'g1', 'a2', 'g2', 'a3', 'g3', 'a4'], 'the next turn: alternating, 2 ms worth of 0.3 ms requests')
  await Promise.all([first, ...waiting])
  t.same(log.slice(10), ['g4', 'a5', 'g5'])
})

t.test('a turn lets one request of each waiting heavy tenant go, even when the first costs more than the quantum', async (t) => {
  const turns = requestTurns()
  const { log, enter, idle } = turns
  await twoHeavyTenants(turns)
  const first = enter('acme', 'first', 2)
  const waiting = [
    ...Array.from({ length: 2 }, async (_, index) => { await enter('acme', `a${index}`, 5) }),
    enter('globex', 'g0', 0.1)
  ]
  idle(100)
  await nextTurn()
  t.same(log, ['first', 'a0', 'g0'], 'globex went on in the same turn as acme\'s 5 ms request')
  idle(100)
  await Promise.all([first, ...waiting])
  t.same(log, ['first', 'a0', 'g0', 'a1'])
})

t.test('while the loop is busier than its busy share, heavy tenants wait for a round every maxWaitMs', async (t) => {
  const turns = requestTurns({ maxWaitMs: 30 })
  const { log, enter, busy } = turns
  await calmAndNoisy(turns)
  // The loop has been busy all of its last 100 ms (other tenants' work, garbage collection…).
  busy(100)
  const started = performance.now()
  const noisy = Array.from({ length: 3 }, async (_, index) => { await enter('noisy', `n${index}`, 0.1) })
  t.same(log, [], 'nothing went on: the loop has no time to spare')
  await nextTurn()
  await nextTurn()
  t.same(log, [], 'nor in the next turns')
  await noisy[0]
  t.same(log, ['n0'], 'a round after maxWaitMs: one request (the only waiting tenant\'s)')
  t.ok(performance.now() - started >= 25, 'not before maxWaitMs')
  await Promise.all(noisy)
  t.same(log, ['n0', 'n1', 'n2'], 'and one round each maxWaitMs after that')
  t.ok(performance.now() - started >= 75, 'three rounds, three waits')
  const calm = enter('calm', 'c0')
  t.same(log.at(-1), 'c0', 'the light tenant goes on at once all along')
  await calm
})

t.test('once the loop has time again, waiting heavy requests go on as the quantum allows, not one round a wait', async (t) => {
  const turns = requestTurns({ maxWaitMs: 30 })
  const { log, enter, busy, idle } = turns
  await calmAndNoisy(turns)
  busy(100)
  const noisy = Array.from({ length: 3 }, async (_, index) => { await enter('noisy', `n${index}`, 0.1) })
  await nextTurn()
  t.same(log, [], 'waiting while the loop is busy')
  // The loop then waits for I/O for a while: its average busy share falls far below the share.
  idle(200)
  await noisy[0]
  t.same(log, ['n0', 'n1', 'n2'], 'all three went on in the same turn')
  await Promise.all(noisy)
})

t.test('leave counts a request out: a tenant whose requests were all answered is light again once its average fades', async (t) => {
  const turns = requestTurns()
  const { log, enter, leave, idle } = turns
  await calmAndNoisy(turns)
  leave('noisy', 30)
  // Keep the calm tenant present, and let the noisy tenant's average fade below one.
  await enter('calm', 'c0')
  idle(5000)
  const noisy = Array.from({ length: 6 }, async (_, index) => { await enter('noisy', `n${index}`, 1) })
  t.same(log, ['c0', 'n0', 'n1', 'n2', 'n3', 'n4', 'n5'], 'all went on at once: six in the service is not more than one on average yet')
  await Promise.all(noisy)
  t.equal(turns.turns.waiting, 0)
})

t.test('leave counts a request out of all tenants\' average too: a tenant whose many requests were answered does not make the heavy one look light', async (t) => {
  const turns = requestTurns()
  const { log, enter, leave, idle } = turns
  // Globex held 60 requests for a second beside the noisy tenant's 30, then all of them were
  // answered: three seconds on, globex is still present (its average fading, near 2), the
  // noisy tenant still holds its 30.
  for (let index = 0; index < 60; index++) await enter('globex', `globex-held${index}`)
  for (let index = 0; index < 30; index++) await enter('noisy', `held${index}`)
  idle(1000)
  leave('globex', 60)
  idle(3000)
  await nextTurn()
  log.length = 0
  const noisy = Array.from({ length: 10 }, async (_, index) => { await enter('noisy', `n${index}`, 1) })
  t.same(log, ['n0', 'n1'], 'the noisy tenant is heavier than all the others together now: past the quantum, its requests wait')
  t.equal(turns.turns.waiting, 8, 'eight wait for their turn')
  await Promise.all(noisy)
})

t.test('while the loop is busy, a heavy tenant keeps as many requests going as the others have on average, and its waiting ones go on, oldest first, as its own are answered', async (t) => {
  const turns = requestTurns()
  const { log, enter, leave, busy } = turns
  // Globex holds 4 requests throughout (its average 2.6 after a second), the calm tenant's
  // average is near nothing: the others have 1.3 on average each.
  for (let index = 0; index < 4; index++) await enter('globex', `globex-held${index}`)
  await calmAndNoisy(turns)
  busy(100)
  const waiting = Array.from({ length: 5 }, async (_, index) => { await enter('noisy', `n${index}`, 0.1) })
  t.same(log, [], 'all five wait: thirty of the noisy tenant\'s are going')
  leave('noisy', 28)
  t.same(log, [], 'two still going, more than the others\' 1.3')
  leave('noisy')
  t.same(log, ['n0'], 'one answered, the oldest waiting one went on in its place, no round needed')
  leave('noisy', 2)
  t.same(log, ['n0', 'n1', 'n2'], 'each answer lets one go, while the loop stays busy')
  t.equal(turns.turns.waiting, 2)
  leave('noisy', 3)
  await Promise.all(waiting)
  t.same(log, ['n0', 'n1', 'n2', 'n3', 'n4'])
})

/**
 * A calm tenant on its own schedule on a fully busy loop, simulated in one turn of the real
 * loop (no round comes: only answers and the tenants' loads let requests go): a request
 * arrives each ms and is answered 3 ms after it goes on; `floodAt(ms)` says how many requests
 * the flood has in the service by then (entered, never answered).
 */
function calmBesideFlood (floodAt: (ms: number) => number): { waits: Array<{ arrived: number, waited: number }>, floodStart: number, turns: TenantRequestTurns } {
  const clock = { wall: 0, active: 0 }
  const turns = new TenantRequestTurns(OPTIONS, { now: () => clock.wall, activeMs: () => clock.active })
  interface Request { leave: () => void, answerAt: number }
  const going: Request[] = []
  const waits: Array<{ arrived: number, waited: number }> = []
  let flood = 0
  const run = (ms: number, withFlood: boolean): void => {
    for (let step = 1; step <= ms; step++) {
      clock.wall += 1
      clock.active += 1
      const floodNow = withFlood ? floodAt(step) : 0
      for (; flood < floodNow; flood++) turns.enter('flood', () => {})
      const arrived = clock.wall
      const request: Request = { leave: () => {}, answerAt: Number.POSITIVE_INFINITY }
      request.leave = turns.enter('calm', () => {
        waits.push({ arrived, waited: clock.wall - arrived })
        request.answerAt = clock.wall + 3
        going.push(request)
      })
      for (const answered of going.filter((candidate) => candidate.answerAt <= clock.wall)) {
        going.splice(going.indexOf(answered), 1)
        answered.leave()
      }
    }
  }
  run(3000, false)
  const floodStart = clock.wall
  run(1000, true)
  return { waits, floodStart, turns }
}

t.test('a flood that comes at once is heavy at once, by the requests it has in the service now: the calm tenant beside it never waits', async (t) => {
  const { waits, floodStart, turns } = calmBesideFlood(() => 40)
  t.equal(waits.length, 4000, 'every calm request went on')
  t.ok(waits.every(({ waited }) => waited === 0), 'each at once, before and after the flood came')
  t.ok(waits.some(({ arrived }) => arrived > floodStart))
  let floodWent = false
  turns.enter('flood', () => { floodWent = true })
  t.notOk(floodWent, 'the flood\'s next request waits: it has more going than the calm tenant has in the service')
  t.equal(turns.waiting, 1)
})

t.test('a tenant found heavy beside a flood still growing is slowed to the pace of its own answers for a moment, not held: its queue clears once the flood outweighs it, and the flood waits instead', async (t) => {
  // One flood request more every 10 ms, up to 40: for a while the calm tenant is the heavier.
  const { waits, floodStart, turns } = calmBesideFlood((ms) => Math.min(40, Math.ceil(ms / 10)))
  const afterFlood = waits.filter(({ arrived }) => arrived > floodStart)
  t.equal(afterFlood.length, 1000, 'every calm request went on: none is left waiting')
  const longest = Math.max(...afterFlood.map(({ waited }) => waited))
  t.ok(longest > 0, `it did wait at first, while the flood was the lighter (longest ${longest} ms)`)
  t.ok(longest <= 100, `no calm request waited more than 100 ms (longest ${longest} ms)`)
  t.ok(afterFlood.filter(({ arrived }) => arrived > floodStart + 300).every(({ waited }) => waited === 0), 'from 300 ms on, each went on at once')
  const floodWaiting = turns.waiting
  t.ok(floodWaiting > 0, 'the flood is the heavy one now: those of its requests past the calm tenant\'s load wait')
  let floodWent = false
  turns.enter('flood', () => { floodWent = true })
  t.notOk(floodWent, 'and so does its next one')
  t.equal(turns.waiting, floodWaiting + 1)
})

t.test('a request whose connection closes while it waits is counted out at once, and not counted as going when its turn comes', async (t) => {
  const clock = { wall: 0, active: 0 }
  const turns = new TenantRequestTurns(OPTIONS, { now: () => clock.wall, activeMs: () => clock.active })
  const held = (tenant: string, count: number): Array<() => void> => Array.from({ length: count }, () => turns.enter(tenant, () => {}))
  // Globex holds two requests throughout, acme thirty for a second: acme is heavy, and may
  // keep two going (globex's load) once the loop is busy.
  held('globex', 2)
  const acmeHeld = held('acme', 30)
  clock.wall += 1000
  clock.active += 1000
  const went: string[] = []
  const waiter = (name: string): () => void => turns.enter('acme', () => { went.push(name) })
  const closed = waiter('closed')
  const second = waiter('second')
  const third = waiter('third')
  t.same(went, [], 'all three wait: thirty of acme\'s are going')
  closed()
  t.equal(turns.waiting, 3, 'a closed request stays in the queue until its turn')
  const lastHeld = acmeHeld.pop() as () => void
  for (const leave of acmeHeld) leave()
  t.same(went, ['closed', 'second'], 'one of acme\'s is going: the closed request\'s turn came and went without taking a place, so the next one went on')
  t.equal(turns.waiting, 1)
  lastHeld()
  t.same(went, ['closed', 'second', 'third'])
  second()
  third()
  t.equal(turns.waiting, 0)
})
