/*
 * Property-based fuzzing of verify: hostile guesses, concurrent and from other tenants and
 * modes, never verify a code, and the right one verifies once.
 */
import t from 'tap'
import fc from 'fast-check'
import type { LightMyRequestResponse } from 'fastify'
import type { FixtureKeys } from '../helper.js'
import { checkAnswer, harness, runProperty, RUNS, SEED, send, type FuzzRequest } from '../support/fuzz.js'

t.comment(`fuzz seed ${SEED}${RUNS === undefined ? '' : `, ${RUNS} runs`}`)

/** How a verify attempt guesses, relative to the real code. */
type GuessPlan =
  | { kind: 'right', before: string, after: string }
  | { kind: 'wrong', offset: number }
  | { kind: 'other', text: string }

// JavaScript's trim() removes all of these but U+200B and NUL: both must fail to verify.
const padding = fc.constantFrom('', ' ', '\t', '\n', '\r\n', '\u00a0', '\ufeff', '\u2028', '\u3000', '\u200b', '\0')
const guessPlan: fc.Arbitrary<GuessPlan> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('right' as const), before: padding, after: padding }) },
  fc.record({ kind: fc.constant('wrong' as const), offset: fc.integer({ min: 1, max: 999_999 }) }),
  // At most 20 code points: inside the schema's 1–64, so every attempt reaches the store.
  fc.record({ kind: fc.constant('other' as const), text: fc.oneof(fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }), fc.constantFrom('１２３４５６', '١٢٣٤٥٦')) })
)

function guessText (plan: GuessPlan, code: string): string {
  switch (plan.kind) {
    case 'right': return plan.before + code + plan.after
    case 'wrong': return String((Number(code) + plan.offset) % 1_000_000).padStart(6, '0')
    case 'other': return plan.text
  }
}

t.test('verify: a code verifies once, only with the right guess, only in its own tenant and mode', async (t) => {
  const { app, logs, keys } = await harness(t)
  const post = async (key: string, url: string, payload: Record<string, string>): Promise<[FuzzRequest, LightMyRequestResponse]> => {
    const request: FuzzRequest = { method: 'POST', url, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, payload: JSON.stringify(payload) }
    const answer = await send(app, request)
    checkAnswer(request, answer, logs)
    return [request, answer]
  }
  const attempt = fc.record({ caller: fc.constantFrom<keyof FixtureKeys>('acmeTest', 'acmeTest', 'acmeLive', 'globexTest'), plan: guessPlan })

  await runProperty(t, 'verify', 2000, fc.asyncProperty(
    fc.stringMatching(/^[a-z0-9]{1,16}$/), fc.constantFrom('example.com', 'Example.COM', 'mail.example.org'), fc.array(attempt, { minLength: 1, maxLength: 4 }),
    async (local, domain, attempts) => {
      const address = `${local}@${domain}`
      const [, dispatched] = await post(keys.acmeTest, '/otp/request', { email: address })
      if (dispatched.statusCode !== 200) throw new Error(`dispatch to ${address} answered ${dispatched.statusCode} ${dispatched.body}`)
      const id = dispatched.json<{ data: { requestId: string } }>().data.requestId
      const inbox = await send(app, { method: 'GET', url: `/sandbox/messages?email=${encodeURIComponent(address)}`, headers: { authorization: `Bearer ${keys.acmeTest}` } })
      const code = inbox.json<{ data: { messages: Array<{ requestId: string, code: string }> } }>().data.messages.find((message) => message.requestId === id)?.code
      if (code === undefined) throw new Error(`no sandbox message for ${id}`)

      // Concurrent, so the single-use guarantee is tested as a race, not only in sequence.
      const results = await Promise.all(attempts.map(async ({ caller, plan }) => {
        const text = guessText(plan, code)
        const [, answer] = await post(keys[caller], '/otp/verify', { requestId: id, userGuess: text })
        return { caller, text, answer }
      }))
      const ownScope = results.filter(({ caller }) => caller === 'acmeTest')
      const verified = results.filter(({ answer }) => answer.statusCode === 200)
      if (verified.length > 1) throw new Error(`verified ${verified.length} times`)
      for (const { caller, text, answer } of results) {
        const right = caller === 'acmeTest' && text.trim() === code
        if (answer.statusCode === 200 && !right) throw new Error(`${caller} verified with ${JSON.stringify(text)} (code ${code})`)
        if (answer.statusCode !== 200) {
          const expectedCode = /^[0-9]{6}$/.test(text.trim()) ? 'CODE_MISMATCH' : 'INVALID_CODE_FORMAT'
          const actual = answer.json<{ code?: string }>().code
          if (answer.statusCode !== 400 || actual !== expectedCode) throw new Error(`${caller} guessing ${JSON.stringify(text)} answered ${answer.statusCode} ${actual ?? ''}, expected 400 ${expectedCode}`)
        }
      }
      if (ownScope.length > 0 && ownScope.every(({ text }) => text.trim() === code) && verified.length !== 1) {
        throw new Error(`the right code ${code} never verified: ${results.map(({ answer }) => answer.statusCode).join(',')}`)
      }
      // Every attempt in the code's own scope consumed it; attempts from elsewhere did not.
      const [, again] = await post(keys.acmeTest, '/otp/verify', { requestId: id, userGuess: code })
      const expectedAgain = ownScope.length > 0 ? 400 : 200
      if (again.statusCode !== expectedAgain) throw new Error(`the right code after ${ownScope.length} own attempts answered ${again.statusCode}, expected ${expectedAgain}`)
    }
  ))
})
