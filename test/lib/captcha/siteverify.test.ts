import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { CaptchaVerifier, type CaptchaSettings } from '../../../lib/captcha/siteverify.js'
import { registryFromJson } from '../../../lib/tenants-file/load.js'
import { generateKey, hashKey } from '../../../lib/keys/api-keys.js'

/** A provider that answers one fixed JSON document, as reCAPTCHA v3 does with a score. */
async function answering (t: Test, answer: object): Promise<string> {
  const server = createServer((request, response) => {
    request.resume()
    request.on('end', () => { response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer)) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.close() })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/siteverify`
}

const verifier = new CaptchaVerifier({ timeoutMs: 1000 })
const settings = (url: string, extra: Partial<CaptchaSettings> = {}): CaptchaSettings => ({
  provider: 'recaptcha', secret: 's', siteverifyUrl: url, expectedHostnames: [], minScore: null, expectedAction: null, ...extra
})

t.test('reCAPTCHA v3 score and action', async (t) => {
  const url = await answering(t, { success: true, score: 0.3, action: 'login', hostname: 'app.acme.test' })
  t.same(await verifier.verify(settings(url), 'tok', '127.0.0.1'), { result: 'pass' })
  t.same(await verifier.verify(settings(url, { minScore: 0.5 }), 'tok', '127.0.0.1'), { result: 'invalid', reasons: ['score-too-low'] })
  t.same(await verifier.verify(settings(url, { minScore: 0.3, expectedAction: 'signup' }), 'tok', '127.0.0.1'), { result: 'invalid', reasons: ['action-mismatch'] })
  t.same(await verifier.verify(settings(url, { expectedHostnames: ['app.acme.test'] }), 'tok', '127.0.0.1'), { result: 'pass' })
})

t.test('an answer without a boolean success is no answer', async (t) => {
  const url = await answering(t, { success: 'yes' })
  t.match(await verifier.verify(settings(url), 'tok', '127.0.0.1'), { result: 'unavailable' })
})

t.test('a token longer than any provider issues never leaves the service', async (t) => {
  t.same(await verifier.verify(settings('http://127.0.0.1:9/'), 'x'.repeat(8193), '127.0.0.1'), { result: 'invalid', reasons: ['malformed-token'] })
})

t.test('the tenants file refuses CAPTCHA settings that cannot work', async (t) => {
  const secretKey = generateKey('secret', 'live')
  const file = (captcha: object | undefined, key: object = {}): unknown => ({
    tiers: { standard: { allowance: 10, window: '1d', sandboxAllowance: 10 } },
    tenants: [{ id: 'acme', tier: 'standard', ...(captcha === undefined ? {} : { captcha }), keys: [{ id: 'k', kind: 'secret', mode: 'live', sha256: hashKey(secretKey), ...key }] }]
  })
  const problems = (document: unknown): readonly string[] | undefined => registryFromJson(document).refused.get('acme')?.problems
  t.same(problems(file({ provider: 'turnstile', secret: 's', minScore: 0.5 })), ['/tenants/0/captcha/minScore: only reCAPTCHA v3 answers a score'])
  t.match(problems(file({ provider: 'turnstile', secret: 's', siteverifyUrl: 'http://captcha.example/siteverify' })), [/must be https/])
  t.match(problems(file(undefined, { requireCaptcha: true })), [/the tenant has no captcha to require/])
  const optedIn = registryFromJson(file({ provider: 'hcaptcha', secret: 's' }, { requireCaptcha: true })).authenticate(secretKey, Date.now())
  t.equal(optedIn?.captchaRequired, true, 'a secret key may opt in on its own')
  const byDefault = registryFromJson(file({ provider: 'hcaptcha', secret: 's' })).authenticate(secretKey, Date.now())
  t.equal(byDefault?.captchaRequired, false, 'by default only restricted keys are asked')
})
