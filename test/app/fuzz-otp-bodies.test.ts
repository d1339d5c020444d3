/*
 * Property-based fuzzing of the OTP routes and the preview with valid keys: hostile JSON bodies
 * and the few headers that matter (test/support/fuzz.ts says what every answer must honour).
 */
import t from 'tap'
import fc from 'fast-check'
import { checkAnswer, harness, otpRequest, runProperty, RUNS, SEED, send, type FuzzRequest } from '../support/fuzz.js'

t.comment(`fuzz seed ${SEED}${RUNS === undefined ? '' : `, ${RUNS} runs`}`)

t.test('hostile JSON bodies with valid keys on the OTP routes', async (t) => {
  const { app, logs, keys } = await harness(t)
  await runProperty(t, 'OTP bodies', 4000, fc.asyncProperty(fc.array(otpRequest(keys), { minLength: 1, maxLength: 3 }), async (requests) => {
    const answers = await Promise.all(requests.map(async (request) => await send(app, request)))
    answers.forEach((answer, index) => { checkAnswer(requests[index] as FuzzRequest, answer, logs) })
  }))
})
