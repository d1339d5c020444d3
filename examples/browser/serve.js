// Serves the browser example: the page (with its configuration and, when a Turnstile site key
// is set, the CAPTCHA widget), its script and the built client, and stands in for the page's
// backend: POST /signup/verified redeems the receipt the page got, for the address the page
// was given, before trusting it. No dependency.
import { createServer } from 'node:http'
import { readFile } from 'node:fs/promises'

const here = new URL('./', import.meta.url)
const clientBundle = new URL('../../clients/typescript/dist/index.js', import.meta.url)
const TURNSTILE_SCRIPT = 'https://challenges.cloudflare.com/turnstile/v0/api.js'

const config = {
  serviceUrl: process.env.EMAIL_OTP_URL ?? 'http://127.0.0.1:3000',
  // The demo tenant's restricted sandbox key, allowed from localhost and 127.0.0.1 pages.
  publicKey: process.env.EMAIL_OTP_PUBLIC_KEY ?? 'rk_test_DemoRestrictedKeyForLocalhostOnly0000',
  turnstileSiteKey: process.env.TURNSTILE_SITE_KEY || null
}
// The backend's secret key (server side only, never in the page): the demo's sandbox one by default.
const secretKey = process.env.EMAIL_OTP_SECRET_KEY ?? 'sk_test_DemoSandboxKeyForLocalUseOnly000000000'

/** The backend's client, from the built client (`npm run client:build`), made on first use. */
let backendClient = null
async function backend () {
  if (backendClient === null) {
    const { createClient } = await import(clientBundle.href)
    backendClient = createClient({ baseUrl: config.serviceUrl, apiKey: secretKey })
  }
  return backendClient
}

/** A small JSON body, or null. */
async function jsonBody (request) {
  let text = ''
  for await (const chunk of request) {
    text += chunk
    if (text.length > 8192) return null
  }
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

/**
 * The page's word proves nothing: the backend redeems the receipt with its secret key, for the
 * address the user typed, and only then treats the address as verified (here it just says so;
 * your backend creates the account or the session). The address always goes with the receipt:
 * a redemption without it is refused (RECEIPT_ADDRESS_REQUIRED).
 */
async function verified (request) {
  const body = await jsonBody(request)
  if (typeof body?.email !== 'string' || typeof body?.receipt !== 'string') return { status: 400, body: { error: 'INVALID_BODY' } }
  try {
    const claims = await (await backend()).redeemReceipt(body.receipt, { email: body.email })
    return { status: 200, body: { verified: true, email: body.email, requestId: claims.requestId } }
  } catch (error) {
    if (error?.name !== 'EmailOtpError') throw error
    return { status: error.status >= 500 || error.status === 0 ? 503 : 400, body: { error: error.code, message: error.message } }
  }
}

function escapeHtml (text) {
  return text.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`)
}

async function page () {
  const template = await readFile(new URL('index.html', here), 'utf8')
  // `<` escaped so that no value can close the script element.
  const data = JSON.stringify(config).replace(/</g, '\\u003c')
  const captcha = config.turnstileSiteKey === null
    ? { head: '', widget: '' }
    : {
        head: `<script src="${TURNSTILE_SCRIPT}" async defer></script>`,
        widget: `<div class="cf-turnstile" data-sitekey="${escapeHtml(config.turnstileSiteKey)}"></div>`
      }
  return template
    .replace('<!-- head -->', () => captcha.head)
    .replace('<!-- captcha -->', () => captcha.widget)
    .replace('<!-- config -->', () => `<script type="application/json" id="config">${data}</script>`)
}

// The page may talk to the service and, with a widget, to Turnstile; nothing else.
const turnstileOrigin = config.turnstileSiteKey === null ? '' : ' https://challenges.cloudflare.com'
const securityPolicy = [
  "default-src 'self'",
  `script-src 'self'${turnstileOrigin}`,
  `frame-src${turnstileOrigin || " 'none'"}`,
  `connect-src 'self' ${new URL(config.serviceUrl).origin}`,
  "style-src 'self' 'unsafe-inline'",
  "base-uri 'none'",
  "form-action 'none'"
].join('; ')

const routes = {
  '/': async () => ({ type: 'text/html; charset=utf-8', body: await page() }),
  '/app.js': async () => ({ type: 'text/javascript; charset=utf-8', body: await readFile(new URL('app.js', here)) }),
  '/client.js': async () => ({ type: 'text/javascript; charset=utf-8', body: await readFile(clientBundle) })
}

const server = createServer(async (request, response) => {
  const path = new URL(request.url ?? '/', 'http://page').pathname
  const route = routes[path]
  const headers = { 'cache-control': 'no-store', 'content-security-policy': securityPolicy, 'x-content-type-options': 'nosniff' }
  // Browsers ask for it on their own; the page has none.
  if (path === '/favicon.ico') {
    response.writeHead(204, headers).end()
    return
  }
  if (request.method === 'POST' && path === '/signup/verified') {
    try {
      const { status, body } = await verified(request)
      response.writeHead(status, { ...headers, 'content-type': 'application/json' }).end(JSON.stringify(body))
    } catch {
      response.writeHead(500, { ...headers, 'content-type': 'application/json' }).end('{"error":"INTERNAL"}')
    }
    return
  }
  if (request.method !== 'GET' || route === undefined) {
    response.writeHead(404, { ...headers, 'content-type': 'text/plain' }).end('Not found\n')
    return
  }
  try {
    const { type, body } = await route()
    response.writeHead(200, { ...headers, 'content-type': type }).end(body)
  } catch (error) {
    const hint = path === '/client.js' && error.code === 'ENOENT' ? 'The client is not built: run npm run client:build\n' : 'Internal error\n'
    response.writeHead(500, { ...headers, 'content-type': 'text/plain' }).end(hint)
  }
})

const host = process.env.HOST ?? '127.0.0.1'
const port = Number(process.env.PORT ?? 5173)
server.listen(port, host, () => {
  process.stdout.write(`browser example on http://${host}:${port} (service ${config.serviceUrl})\n`)
})
// Ctrl-C or a stop signal closes the server, so that nothing is left listening.
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    server.close()
    server.closeAllConnections()
  })
}
