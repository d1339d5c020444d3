// Serves the browser example: the page (with its configuration and, when a Turnstile site key
// is set, the CAPTCHA widget), its script and the built client. No dependency.
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
