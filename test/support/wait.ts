import { setTimeout as sleep } from 'node:timers/promises'

/**
 * Polls `check` until it holds. The deadline is a stall guard, not a measurement: a test waits
 * for the event itself, however late it comes on a busy machine, and fails only if it never
 * comes. Rejects naming `what` (and the last error `check` threw, if any).
 */
export async function until (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  let problem: unknown
  for (;;) {
    try {
      if (await check()) return
    } catch (error) {
      problem = error
    }
    if (Date.now() > deadline) {
      throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}${problem instanceof Error ? ` (${problem.message})` : ''}`)
    }
    await sleep(10)
  }
}

/**
 * Calls `attempt` until `done` holds for its answer and returns every answer, the last one
 * being the one that did. For conditions that only an attempt can observe (a claim that lapsed,
 * a mark that expired), so the test can assert what each earlier attempt saw.
 */
export async function attemptUntil<T> (what: string, attempt: () => Promise<T>, done: (answer: T) => boolean, timeoutMs = 20_000): Promise<T[]> {
  const answers: T[] = []
  await until(what, async () => {
    const answer = await attempt()
    answers.push(answer)
    return done(answer)
  }, timeoutMs)
  return answers
}
