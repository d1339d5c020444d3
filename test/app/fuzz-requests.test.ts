/*
 * Property-based fuzzing of every route in process: any method, path, query string, header
 * and body (test/support/fuzz.ts says what every answer must honour).
 */
import t from 'tap'
import fc from 'fast-check'
import { anyRequest, checkAnswer, harness, runProperty, RUNS, SEED, send, type FuzzRequest } from '../support/fuzz.js'

t.comment(`fuzz seed ${SEED}${RUNS === undefined ? '' : `, ${RUNS} runs`}`)

t.test('any request to any route: no unexpected 5xx, contract error bodies, Object.prototype intact', async (t) => {
  const { app, logs, keys } = await harness(t)
  // Batches run concurrently, as real traffic does (idempotency claims, shared stores).
  await runProperty(t, 'any request', 5000, fc.asyncProperty(fc.array(anyRequest(keys), { minLength: 1, maxLength: 3 }), async (requests) => {
    const answers = await Promise.all(requests.map(async (request) => await send(app, request)))
    answers.forEach((answer, index) => { checkAnswer(requests[index] as FuzzRequest, answer, logs) })
  }))
})
