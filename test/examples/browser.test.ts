import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium, type Browser } from 'playwright-core'
import { generateKey, hashKey } from '../../lib/keys/api-keys.js'
import type { TenantsFile } from '../../schemas/tenants.js'
import { startExample } from '../support/example-process.js'
import { freePort } from '../support/redis.js'
import { sandboxMessages } from '../support/sandbox.js'
import { startServer } from '../support/service-process.js'

/**
 * The browser example: its tiny server, and the page driven by headless Chromium (Debian's
 * package, through playwright-core) against the real service. The screenshot of the verified
 * page is kept in test-artifacts/.
 */

const root = fileURLToPath(new URL('../../', import.meta.url))
const CHROMIUM = '/usr/bin/chromium'
const chromiumAvailable = existsSync(CHROMIUM)

/** Tap options for the tests that need Chromium: skipped loudly without it, a failure under CI=true. */
function chromiumOptions (): { skip: string | false } {
  if (chromiumAvailable) return { skip: false }
  if (process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing, and CI=true requires the browser example test to run`)
  return { skip: `${CHROMIUM} is not installed` }
}
if (!chromiumAvailable && process.env.CI !== 'true') {
  process.stderr.write('\n' + '!'.repeat(78) + '\n' +
    `!!  ${CHROMIUM} not found: the browser example tests are SKIPPED.\n` +
    '!!  Install it (apt-get install -y chromium) to run the whole suite.\n' +
    '!'.repeat(78) + '\n\n')
}

// Every page action waits at most this long: far below the test runner's 180 s.
const ACTION_TIMEOUT_MS = 30_000

// The page is served from the built client, as `npm run client:build` leaves it.
const build = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'clients/typescript/tsconfig.json')], { encoding: 'utf8' })
if (build.status !== 0) throw new Error(`the client did not build: ${build.stdout}${build.stderr}`)

async function launch (t: Test): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    timeout: 60_000
  })
  t.teardown(async () => { await browser.close() })
  return browser
}

/** A tenant whose restricted sandbox key is allowed from exactly one page origin. */
function tenantsFor (t: Test, pageOrigin: string): { path: string, secret: string, restricted: string } {
  const secret = generateKey('secret', 'test')
  const restricted = generateKey('restricted', 'test')
  const file: TenantsFile = {
    tiers: { trial: { allowance: 100, window: '1d', sandboxAllowance: 100 } },
    tenants: [{
      id: 'shop',
      tier: 'trial',
      brand: { name: 'Shop' },
      keys: [
        { id: 'shop_backend', kind: 'secret', mode: 'test', sha256: hashKey(secret) },
        { id: 'shop_page', kind: 'restricted', mode: 'test', sha256: hashKey(restricted), origins: [pageOrigin] }
      ]
    }]
  }
  const path = join(t.testdir({}), 'tenants.json')
  writeFileSync(path, JSON.stringify(file, null, 2))
  return { path, secret, restricted }
}

t.test('serve.js renders the Turnstile widget only when a site key is configured', async (t) => {
  const plain = await startExample(t, 'browser/serve.js', {})
  const html = await (await fetch(plain.base)).text()
  t.notMatch(html, /challenges\.cloudflare\.com|cf-turnstile/, 'no widget, no script')
  t.match(html, /"publicKey":"rk_test_DemoRestrictedKeyForLocalhostOnly0000"/, 'the demo restricted key by default')
  const client = await fetch(`${plain.base}/client.js`)
  t.equal(client.headers.get('content-type'), 'text/javascript; charset=utf-8')
  t.match(await client.text(), /export function createClient/, 'the built client')
  t.equal((await fetch(`${plain.base}/../../package.json`)).status, 404, 'nothing else is served')

  // Cloudflare's documented test site key, and a value that tries to break out of the markup.
  const widget = await startExample(t, 'browser/serve.js', { TURNSTILE_SITE_KEY: '1x00000000000000000000AA' })
  const withWidget = await fetch(widget.base)
  const page = await withWidget.text()
  t.match(page, '<script src="https://challenges.cloudflare.com/turnstile/v0/api.js" async defer></script>')
  t.match(page, '<div class="cf-turnstile" data-sitekey="1x00000000000000000000AA"></div>')
  t.match(withWidget.headers.get('content-security-policy'), /frame-src https:\/\/challenges\.cloudflare\.com/)
  const hostile = await startExample(t, 'browser/serve.js', { TURNSTILE_SITE_KEY: '"><script>alert(1)</script>' })
  const escaped = await (await fetch(hostile.base)).text()
  t.notMatch(escaped, '<script>alert(1)', 'configuration values are escaped')
  t.match(escaped, 'data-sitekey="&#34;&#62;&#60;script&#62;')
})

t.test('the page\'s backend redeems the receipt for the address the user typed, once', async (t) => {
  const tenants = tenantsFor(t, 'http://127.0.0.1:1')
  const service = await startServer(t, { TENANTS_FILE: tenants.path })
  const site = await startExample(t, 'browser/serve.js', { EMAIL_OTP_URL: service.base, EMAIL_OTP_SECRET_KEY: tenants.secret })
  const email = `backend-${process.pid}@example.com`
  const call = async (path: string, body: unknown): Promise<any> => await (await fetch(service.base + path, { method: 'POST', headers: { authorization: `Bearer ${tenants.secret}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })).json()
  const { requestId } = (await call('/otp/request', { email })).data
  const [message] = await sandboxMessages(service.base, tenants.secret, email)
  const { receipt } = (await call('/otp/verify', { requestId, userGuess: message?.code })).data
  const confirm = async (body: unknown): Promise<[number, unknown]> => {
    const answer = await fetch(`${site.base}/signup/verified`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    return [answer.status, await answer.json()]
  }
  t.match(await confirm({ email: 'mallory@example.com', receipt }), [400, { error: 'RECEIPT_ADDRESS_MISMATCH' }], 'a receipt for another address is refused')
  t.match(await confirm({ receipt }), [400, { error: 'INVALID_BODY' }], 'no address, no redemption')
  t.same(await confirm({ email, receipt }), [200, { verified: true, email, requestId }], 'the address the code was sent to is verified')
  t.match(await confirm({ email, receipt }), [400, { error: 'RECEIPT_ALREADY_REDEEMED' }], 'once')
})

t.test('the browser example dispatches and verifies with a restricted key in headless Chromium', chromiumOptions(), async (t) => {
  const pagePort = await freePort()
  const pageOrigin = `http://127.0.0.1:${pagePort}`
  const tenants = tenantsFor(t, pageOrigin)
  const service = await startServer(t, { TENANTS_FILE: tenants.path })
  const site = await startExample(t, 'browser/serve.js', { EMAIL_OTP_URL: service.base, EMAIL_OTP_PUBLIC_KEY: tenants.restricted, EMAIL_OTP_SECRET_KEY: tenants.secret }, pagePort)
  const browser = await launch(t)
  const page = await browser.newPage()
  page.setDefaultTimeout(ACTION_TIMEOUT_MS)
  const problems: string[] = []
  page.on('pageerror', (error) => problems.push(error.message))
  page.on('console', (message) => { if (message.type() === 'error') problems.push(message.text()) })
  page.on('response', (response) => { if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`) })

  const email = `page-${process.pid}@example.com`
  await page.goto(site.base, { timeout: ACTION_TIMEOUT_MS })
  t.equal(await page.getByLabel('Code').isVisible(), false, 'no code field before a code was sent')
  await page.getByLabel('Email').fill(email)
  await page.getByRole('button', { name: 'Send code' }).click()
  await page.getByText(`A code was sent to ${email}.`).waitFor()

  const [message] = await sandboxMessages(service.base, tenants.secret, email)
  if (message === undefined) throw new Error('no sandbox message')
  await page.getByLabel('Code').fill(message.code)
  await page.getByRole('button', { name: 'Verify' }).click()
  await page.getByText('Email address verified.').waitFor()
  t.equal(await page.getByLabel('Code').isVisible(), false, 'the code field is gone once the code is used')
  t.equal(await page.locator('#status').getAttribute('data-state'), 'verified', 'said only once the backend redeemed the receipt for the address')

  mkdirSync(join(root, 'test-artifacts'), { recursive: true })
  const screenshot = join(root, 'test-artifacts', 'browser-example.png')
  await page.screenshot({ path: screenshot, fullPage: true, timeout: ACTION_TIMEOUT_MS })
  t.same([...readFileSync(screenshot).subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], `screenshot saved: ${screenshot}`)
  t.same(problems, [], 'no script error on the page')
})

t.test('the same page on an origin the key does not list is refused', chromiumOptions(), async (t) => {
  const tenants = tenantsFor(t, 'http://127.0.0.1:1')
  const service = await startServer(t, { TENANTS_FILE: tenants.path })
  const site = await startExample(t, 'browser/serve.js', { EMAIL_OTP_URL: service.base, EMAIL_OTP_PUBLIC_KEY: tenants.restricted })
  const browser = await launch(t)
  const page = await browser.newPage()
  page.setDefaultTimeout(ACTION_TIMEOUT_MS)
  await page.goto(site.base, { timeout: ACTION_TIMEOUT_MS })
  await page.getByLabel('Email').fill('elsewhere@example.com')
  await page.getByRole('button', { name: 'Send code' }).click()
  await page.getByText('(ORIGIN_NOT_ALLOWED)').waitFor()
  t.equal(await page.locator('#status').getAttribute('data-state'), 'error')
  t.same(await sandboxMessages(service.base, tenants.secret, 'elsewhere@example.com'), [], 'nothing was sent')
})
