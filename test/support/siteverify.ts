import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

/** One siteverify request as the provider received it (the secret is checked, not kept). */
export interface SiteverifyCall {
  response: string
  remoteip: string | null
}

/**
 * A siteverify endpoint over real HTTP that behaves as Cloudflare Turnstile documents it:
 * form-encoded `secret`, `response`, `remoteip`; tokens are single use (a second check answers
 * `timeout-or-duplicate`); a wrong secret answers `invalid-input-secret`. `mode` turns it into
 * a failing provider: `down` answers 500, `silent` never answers, `garbage` answers HTML.
 */
export class FakeSiteverify {
  readonly calls: SiteverifyCall[] = []
  mode: 'up' | 'down' | 'silent' | 'garbage' = 'up'
  readonly #secret: string
  readonly #fresh = new Map<string, { hostname: string, action: string }>()
  readonly #used = new Set<string>()
  readonly #server = createServer((request, response) => { this.#answer(request, response) })
  readonly #held: ServerResponse[] = []
  url = ''

  constructor (secret: string) {
    this.#secret = secret
  }

  async start (): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve))
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/turnstile/v0/siteverify`
    return this
  }

  async stop (): Promise<void> {
    for (const response of this.#held) response.destroy()
    this.#server.closeAllConnections()
    await new Promise<void>((resolve) => this.#server.close(() => { resolve() }))
  }

  /** A token as the widget hands one to a visitor who solved the challenge on `hostname`. */
  solve (hostname = 'app.acme.test', action = 'login'): string {
    const token = `0.${randomBytes(48).toString('base64url')}`
    this.#fresh.set(token, { hostname, action })
    return token
  }

  #answer (request: IncomingMessage, response: ServerResponse): void {
    let body = ''
    request.on('data', (chunk: Buffer) => { body += chunk.toString() })
    request.on('end', () => {
      const form = new URLSearchParams(body)
      const token = form.get('response') ?? ''
      this.calls.push({ response: token, remoteip: form.get('remoteip') })
      if (this.mode === 'silent') {
        this.#held.push(response)
        return
      }
      if (this.mode === 'down') {
        response.writeHead(500).end('internal error')
        return
      }
      if (this.mode === 'garbage') {
        response.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>')
        return
      }
      const reply = (answer: object): void => { response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer)) }
      if (form.get('secret') !== this.#secret) {
        reply({ success: false, 'error-codes': ['invalid-input-secret'] })
        return
      }
      const solved = this.#fresh.get(token)
      if (solved === undefined) {
        reply({ success: false, 'error-codes': [token === '' ? 'missing-input-response' : this.#used.has(token) ? 'timeout-or-duplicate' : 'invalid-input-response'] })
        return
      }
      this.#fresh.delete(token)
      this.#used.add(token)
      reply({ success: true, 'error-codes': [], challenge_ts: new Date().toISOString(), hostname: solved.hostname, action: solved.action })
    })
  }
}
