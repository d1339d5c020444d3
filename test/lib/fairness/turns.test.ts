import { setImmediate as nextTurn } from 'node:timers/promises'
import t from 'tap'
import { TenantTurns } from '../../../lib/fairness/turns.js'

/** Turns on a clock that only the steps move: each step "takes" `costMs`. */
function turns (quantumMs: number): { turns: TenantTurns, clock: { now: number }, step: (name: string, costMs: number, log: string[]) => () => string } {
  const clock = { now: 0 }
  return {
    turns: new TenantTurns(quantumMs, () => clock.now),
    clock,
    step: (name, costMs, log) => () => {
      clock.now += costMs
      log.push(name)
      return name
    }
  }
}

t.test('while nobody waits, a step runs at once, within the caller\'s own turn of the event loop', async (t) => {
  const { turns: taken, step } = turns(1)
  const log: string[] = []
  const result = taken.run('acme', step('a1', 0.1, log))
  t.same(log, ['a1'], 'ran before run() returned')
  t.equal(await result, 'a1')
})

t.test('past the quantum, steps wait; each turn runs one step of each waiting tenant in turn, so a tenant with one step waits for one step of the others', async (t) => {
  const { turns: taken, step } = turns(1)
  const log: string[] = []
  // One turn of the event loop: acme's admitted dispatches arrive first, 20 of them.
  const acme = Array.from({ length: 20 }, (_, index) => taken.run('acme', step(`acme${index}`, 0.4, log)))
  t.same(log, ['acme0', 'acme1', 'acme2'], 'the quantum (1 ms) is spent at once: three run, the rest wait')
  t.equal(taken.waiting, 17)
  // The next turn: globex's one dispatch has arrived meanwhile.
  await nextTurn()
  const before = log.length
  const globex = taken.run('globex', step('globex0', 0.1, log))
  t.equal(log.length, before, 'globex waits too: acme\'s steps are waiting')
  await Promise.all([...acme, globex])
  const globexAt = log.indexOf('globex0')
  t.ok(globexAt <= before + 1, `globex's step ran at position ${globexAt}, after at most one of acme's ${20 - before} waiting steps`)
  t.equal(log.length, 21, 'every step ran')
  t.equal(taken.waiting, 0)
})

t.test('a turn of the event loop runs waiting steps for at most the quantum', async (t) => {
  const { turns: taken, step } = turns(1)
  const log: string[] = []
  const all = Array.from({ length: 10 }, (_, index) => taken.run('acme', step(`s${index}`, 0.5, log)))
  t.same(log, ['s0', 's1'], 'the caller\'s turn: until 1 ms is spent')
  await nextTurn()
  t.same(log, ['s0', 's1', 's2', 's3'], 'the next turn: 1 ms more, then the sockets are read again')
  await Promise.all(all)
  t.equal(log.length, 10)
})

t.test('a step that throws rejects its own run only', async (t) => {
  const { turns: taken, step } = turns(0)
  const log: string[] = []
  const failing = taken.run('acme', () => { throw new Error('broken template') })
  const fine = taken.run('acme', step('after', 0, log))
  await t.rejects(failing, new Error('broken template'))
  t.equal(await fine, 'after')
})
