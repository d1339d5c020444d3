import { setImmediate as nextTurn } from 'node:timers/promises'
import t from 'tap'
import { TenantRequestTurns } from '../../../lib/tenants/request-turns.js'

/** Turns on a clock the test moves: each request that goes on "takes" `costMs` of the loop. */
function requestTurns (quantumMs: number): { turns: TenantRequestTurns, log: string[], enter: (tenant: string, name: string, costMs: number) => Promise<void> } {
  const clock = { now: 0 }
  const log: string[] = []
  const turns = new TenantRequestTurns(quantumMs, () => clock.now)
  return {
    turns,
    log,
    enter: async (tenant, name, costMs) => {
      await new Promise<void>((resolve) => {
        turns.enter(tenant, () => {
          clock.now += costMs
          log.push(name)
          resolve()
        })
      })
    }
  }
}

t.test('while the loop has time and nobody waits, a request goes on at once, in the caller\'s own turn', async (t) => {
  const { turns, log, enter } = requestTurns(2)
  const entered = enter('acme', 'a0', 0.3)
  t.same(log, ['a0'], 'went on before enter() returned')
  await entered
  t.equal(turns.waiting, 0)
})

t.test('past the quantum, requests wait; each later turn lets one request of each waiting tenant go on', async (t) => {
  const { turns, log, enter } = requestTurns(2)
  // One turn of the event loop: acme's 30 requests arrive together (a full bucket at once).
  const acme = Array.from({ length: 30 }, async (_, index) => { await enter('acme', `acme${index}`, 0.5) })
  t.same(log, ['acme0', 'acme1', 'acme2', 'acme3'], 'the quantum (2 ms) is spent: four go on, the rest wait')
  t.equal(turns.waiting, 26)
  // globex's one request arrives in the same turn, behind acme's.
  const globex = enter('globex', 'globex0', 0.1)
  t.equal(log.length, 4, 'globex waits too: acme\'s requests are waiting')
  await globex
  t.ok(log.indexOf('globex0') <= 5, `globex went on at position ${log.indexOf('globex0')}, after at most one of acme's 26 waiting requests`)
  await Promise.all(acme)
  t.equal(log.length, 31, 'every request went on')
  t.equal(turns.waiting, 0)
})

t.test('tenants waiting together alternate, one request each per turn', async (t) => {
  const { log, enter } = requestTurns(1)
  const first = enter('acme', 'first', 1)
  const waiting = [
    ...Array.from({ length: 3 }, async (_, index) => { await enter('acme', `a${index}`, 0.1) }),
    ...Array.from({ length: 3 }, async (_, index) => { await enter('globex', `g${index}`, 0.1) })
  ]
  await Promise.all([first, ...waiting])
  t.same(log, ['first', 'a0', 'g0', 'a1', 'g1', 'a2', 'g2'])
})

t.test('a new turn of the event loop starts with its quantum whole', async (t) => {
  const { turns, log, enter } = requestTurns(2)
  await enter('acme', 'a0', 1.5)
  await nextTurn()
  const later = enter('acme', 'a1', 1.5)
  t.same(log, ['a0', 'a1'], 'went on at once: the 1.5 ms were spent in an earlier turn')
  await later
  t.equal(turns.waiting, 0)
})

t.test('a tenant waiting alone has all its requests go on in the next turn', async (t) => {
  const { turns, log, enter } = requestTurns(1)
  const all = Array.from({ length: 10 }, async (_, index) => { await enter('acme', `a${index}`, 0.5) })
  t.same(log, ['a0', 'a1'], 'the quantum is spent: the rest wait')
  await nextTurn()
  t.equal(log.length, 10, 'the next turn let the other eight go together')
  await Promise.all(all)
  t.equal(turns.waiting, 0)
})
