import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { createServer, globalAgent } from 'node:https'
import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { FeedbackUnavailable } from '../../../lib/feedback/refusals.js'
import { CERT_MAX_BYTES, NEW_CERT_URLS_PER_MINUTE, SigningCertificates } from '../../../lib/feedback/sns-certificates.js'

const KEY = readFileSync(new URL('../../fixtures/sns/signing-key.pem', import.meta.url), 'utf8')
const CERT = readFileSync(new URL('../../fixtures/sns/signing-cert.pem', import.meta.url), 'utf8')
// The loopback server's TLS certificate is the test's own: trusted in this process only.
globalAgent.options.ca = CERT

type Route = (response: ServerResponse) => void

/** A loopback HTTPS certificate host: each path answers as its route says; every request is counted. */
async function startHost (t: Test, routes: Record<string, Route>): Promise<{ url: (path: string) => URL, requests: string[] }> {
  const requests: string[] = []
  const stalled = new Set<ServerResponse>()
  const server = createServer({ key: KEY, cert: CERT }, (request, response) => {
    requests.push(request.url ?? '')
    const route = routes[request.url ?? '']
    if (route === undefined) response.writeHead(404).end()
    else route(response)
    if (!response.writableEnded) stalled.add(response)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const response of stalled) response.destroy()
    server.closeAllConnections()
    server.close()
    await once(server, 'close')
  })
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('no address')
  return { url: (path) => new URL(`https://127.0.0.1:${address.port}${path}`), requests }
}

async function unavailable (t: Test, attempt: Promise<unknown>, what: string): Promise<void> {
  await t.rejects(attempt, FeedbackUnavailable, what)
}

t.test('a certificate is fetched once and its public key kept; concurrent asks share the fetch', async (t) => {
  const host = await startHost(t, { '/good.pem': (response) => response.writeHead(200).end(CERT) })
  const certificates = new SigningCertificates()
  const keys = await Promise.all(Array.from({ length: 5 }, async () => await certificates.publicKey(host.url('/good.pem'))))
  t.equal(keys[0]?.asymmetricKeyType, 'rsa')
  t.ok(keys.every((key) => key === keys[0]), 'one key object')
  await certificates.publicKey(host.url('/good.pem'))
  t.same(host.requests, ['/good.pem'], 'one fetch for six asks')
})

t.test('what is not a certificate within the bounds is unavailable, and not fetched again for a minute', async (t) => {
  let now = 1_000_000
  const host = await startHost(t, {
    '/large.pem': (response) => response.writeHead(200).end(CERT.padEnd(CERT_MAX_BYTES + 1, '\n')),
    '/endless.pem': (response) => { response.writeHead(200); response.write(Buffer.alloc(64 * 1024, 'A')); response.write(Buffer.alloc(64 * 1024, 'A')) },
    '/stalls.pem': (response) => { response.writeHead(200); response.write(CERT.slice(0, 100)) },
    '/silent.pem': () => {},
    '/redirect.pem': (response) => response.writeHead(302, { location: '/good.pem' }).end(),
    '/good.pem': (response) => response.writeHead(200).end(CERT),
    '/junk.pem': (response) => response.writeHead(200).end('-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n'),
    '/public-key.pem': (response) => response.writeHead(200).end('-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n'),
    '/gone.pem': (response) => response.writeHead(404).end()
  })
  const certificates = new SigningCertificates({ now: () => now, timeoutMs: 300 })
  for (const path of ['/large.pem', '/endless.pem', '/stalls.pem', '/silent.pem', '/redirect.pem', '/junk.pem', '/public-key.pem', '/gone.pem']) {
    await unavailable(t, certificates.publicKey(host.url(path)), path)
  }
  t.notOk(host.requests.includes('/good.pem'), 'a redirect is not followed')
  const fetched = host.requests.length
  await unavailable(t, certificates.publicKey(host.url('/gone.pem')), 'a URL that just failed')
  t.equal(host.requests.length, fetched, 'is not fetched again')
  now += 60_000
  await unavailable(t, certificates.publicKey(host.url('/gone.pem')), 'a minute later')
  t.equal(host.requests.length, fetched + 1, 'it is tried again')
})

t.test('at most ten new certificate URLs are fetched a minute; known ones are served meanwhile', async (t) => {
  let now = 1_000_000
  const routes: Record<string, Route> = {}
  for (let index = 0; index <= NEW_CERT_URLS_PER_MINUTE + 1; index++) routes[`/c${index}.pem`] = (response) => response.writeHead(200).end(CERT)
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates({ now: () => now })
  for (let index = 0; index < NEW_CERT_URLS_PER_MINUTE; index++) await certificates.publicKey(host.url(`/c${index}.pem`))
  await unavailable(t, certificates.publicKey(host.url(`/c${NEW_CERT_URLS_PER_MINUTE}.pem`)), 'the eleventh new URL')
  t.equal(host.requests.length, NEW_CERT_URLS_PER_MINUTE, 'not fetched')
  await certificates.publicKey(host.url('/c0.pem'))
  t.equal(host.requests.length, NEW_CERT_URLS_PER_MINUTE, 'a known certificate needs no fetch')
  now += 60_000
  await certificates.publicKey(host.url(`/c${NEW_CERT_URLS_PER_MINUTE}.pem`))
  t.equal(host.requests.length, NEW_CERT_URLS_PER_MINUTE + 1, 'the next minute, it is')
})
