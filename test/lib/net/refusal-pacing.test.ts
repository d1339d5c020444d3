import { test } from 'tap'
import { RefusalPacer } from '../../../lib/net/refusal-pacing.js'

function pacer (options: { perSecond?: number, burst?: number, maxDelayMs?: number, maxSources?: number, maxHeld?: number } = {}): { pacer: RefusalPacer, clock: { now: number } } {
  const clock = { now: 1_000_000 }
  return {
    clock,
    pacer: new RefusalPacer({ perSecond: 10, burst: 5, maxDelayMs: 1000, maxSources: 100, maxHeld: 100, ...options, now: () => clock.now })
  }
}

test('a source is answered at once for its burst, then one interval later per refusal, up to the maximum delay', async (t) => {
  const { pacer: paced } = pacer()
  const delays = Array.from({ length: 20 }, () => paced.delayFor('198.51.100.1'))
  t.same(delays.slice(0, 6), [0, 0, 0, 0, 0, 0], 'the burst (5) and the refusal its tolerance leaves room for')
  t.same(delays.slice(6, 10), [100, 200, 300, 400], 'then one interval (1/10 s) more each')
  t.ok(delays.slice(10).every((delay) => delay <= 1000), 'never past the maximum delay')
  t.equal(delays.at(-1), 1000, 'a source that keeps asking is held the maximum')
})

test('a source that stops is answered at once again once its debt has run out, however long it asked', async (t) => {
  const { pacer: paced, clock } = pacer()
  for (let i = 0; i < 10_000; i++) paced.delayFor('198.51.100.1')
  t.equal(paced.delayFor('198.51.100.1'), 1000, 'held the maximum after a long flood')
  // The debt is bounded by the burst's time and the maximum delay: 0.5 s + 1 s.
  clock.now += 1600
  t.equal(paced.delayFor('198.51.100.1'), 0, 'answered at once 1.6 s after it stopped')
})

test('the refusals over time are bounded by the burst and the pace, whatever the source sends', async (t) => {
  const { pacer: paced, clock } = pacer()
  // A closed loop that sends again as soon as each answer arrives, for 10 s.
  const end = clock.now + 10_000
  let answers = 0
  while (clock.now < end) {
    clock.now += paced.delayFor('198.51.100.1') + 1
    answers++
  }
  t.ok(answers <= 5 + 1 + 10 * 10, `${answers} answers in 10 s: the burst and 10 a second`)
  t.ok(answers >= 100, `${answers} answers: the pace, not a stop`)
})

test('each source has its own pace', async (t) => {
  const { pacer: paced } = pacer()
  for (let i = 0; i < 100; i++) paced.delayFor('198.51.100.1')
  t.equal(paced.delayFor('198.51.100.2'), 0, 'another source is answered at once')
})

test('past maxSources the least recently refused source is forgotten: answered at once again, never held longer', async (t) => {
  const { pacer: paced } = pacer({ maxSources: 2 })
  for (let i = 0; i < 100; i++) paced.delayFor('198.51.100.1')
  paced.delayFor('198.51.100.2')
  paced.delayFor('198.51.100.3')
  t.equal(paced.delayFor('198.51.100.1'), 0)
})

test('hold waits out the delay, counts what it holds, and release answers every hold at once', async (t) => {
  const paced = new RefusalPacer({ perSecond: 1, burst: 1, maxDelayMs: 60_000, maxSources: 10, maxHeld: 2 })
  const answered: number[] = []
  t.equal(paced.hold('a', () => answered.push(1)), false, 'the burst is answered at once')
  t.equal(paced.hold('a', () => answered.push(2)), false, 'the refusal the tolerance leaves room for too')
  t.equal(paced.hold('a', () => answered.push(3)), true, 'then held')
  t.equal(paced.hold('a', () => answered.push(4)), true)
  t.equal(paced.held, 2)
  t.equal(paced.hold('a', () => answered.push(5)), false, 'past maxHeld answered at once')
  t.same(answered, [1, 2, 5])
  paced.release()
  t.same(answered, [1, 2, 5, 3, 4], 'released in order')
  t.equal(paced.held, 0)
  const { pacer: short } = { pacer: new RefusalPacer({ perSecond: 100, burst: 1, maxDelayMs: 1000, maxSources: 10, maxHeld: 10 }) }
  short.hold('b', () => {})
  short.hold('b', () => {})
  await new Promise<void>((resolve) => { short.hold('b', resolve) })
  t.equal(short.held, 0, 'a hold ends by itself after its delay')
})
