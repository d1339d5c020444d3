import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { parseConfig } from '../../../lib/config/from-env.js'
import { FeedbackThrottled, FeedbackUnavailable } from '../../../lib/feedback/refusals.js'
import { CERT_FETCHES_IN_FLIGHT, CERT_FETCHES_PER_SOURCE, CERT_KEPT_MS, CERT_MAX_BYTES, FAILED_CERT_URL_MS, SigningCertificates, type CertificateRequester } from '../../../lib/feedback/sns-certificates.js'
import { signingCertificateUrl, type CertificateUrl } from '../../../lib/feedback/sns-message.js'
import { playHost, TLS_CERT, type PlayedHost } from '../../support/https-hosts.js'

const CERT = TLS_CERT
const SNS_HOST = 'sns.eu-west-1.amazonaws.com'
const DEFAULT = parseConfig({}).sesFeedback.certUrlPattern
/** The hosts played here, whole, whatever the path. */
const PLAYED = /^https:\/\/(sns\.eu-west-1\.amazonaws\.com|evil\.example)\//

type Route = (response: ServerResponse) => void

/** SNS's certificate host, played on loopback: each path answers as its route says. */
async function startHost (t: Test, routes: Record<string, Route>, hostname = SNS_HOST): Promise<PlayedHost & { url: (path: string) => CertificateUrl }> {
  const host = await playHost(t, hostname, (request, response) => {
    const route = routes[request.url ?? '']
    if (route === undefined) response.writeHead(404).end()
    else route(response)
  })
  return { ...host, url: (path) => signingCertificateUrl(`${host.origin}${path}`, PLAYED) }
}

/** A source that spends tokens of its own; UNIDENTIFIED: every caller through the sidecar without an identity. */
const from = (source: string): CertificateRequester => ({ source, spendsTokens: true })
const UNIDENTIFIED: CertificateRequester = { source: 'mesh:unidentified', spendsTokens: false }
const pem = (name: string): string => `/SimpleNotificationService-${name}.pem`
const paths = (host: PlayedHost): string[] => host.requests.map((request) => request.path)

t.test('a certificate is fetched once from port 443 of the checked host and its key kept a day; concurrent asks share the fetch', async (t) => {
  let now = 1_000_000
  const host = await startHost(t, { [pem('a1')]: (response) => response.writeHead(200).end(CERT) })
  const certificates = new SigningCertificates({ now: () => now })
  const url = signingCertificateUrl(`${host.origin}${pem('a1')}`, DEFAULT)
  const keys = await Promise.all(Array.from({ length: 5 }, async (_, index) => await certificates.publicKey(url, from(`source-${index}`))))
  t.equal(keys[0]?.asymmetricKeyType, 'rsa')
  t.ok(keys.every((key) => key === keys[0]), 'one key object')
  await certificates.publicKey(url, from('another'))
  t.same(host.requests, [{ host: SNS_HOST, port: 443, path: pem('a1') }], 'one fetch for six asks, to the host and path checked')
  now += CERT_KEPT_MS - 1
  await certificates.publicKey(url, from('another'))
  t.equal(host.requests.length, 1, 'kept for a day')
  now += 1
  await certificates.publicKey(url, from('another'))
  t.equal(host.requests.length, 2, 'then fetched again, so a rotated or revoked certificate is not trusted forever')
})

t.test('a failed URL is told once per failure, however many messages name it; its 503s, and a source\'s fetch under way, are the sender\'s own', async (t) => {
  let now = 1_000_000
  const host = await startHost(t, {})
  const failures: string[] = []
  const certificates = new SigningCertificates({ now: () => now, timeoutMs: 300, fetchFailed: (url, reason) => { failures.push(`${url} ${reason}`) } })
  const url = host.url(pem('f1'))
  const reasons = async (asks: Array<Promise<unknown>>): Promise<string[]> => (await Promise.allSettled(asks)).map((settled) => settled.status === 'rejected' && settled.reason instanceof FeedbackUnavailable ? `${settled.reason.reason} ${settled.reason.sendersOwn}` : 'other')
  t.same(await reasons(Array.from({ length: 5 }, async () => await certificates.publicKey(url, from('stranger')))), Array.from({ length: 5 }, () => 'certificate-failed true'), 'five messages sharing one failed fetch')
  t.same(await reasons(Array.from({ length: 5 }, async () => await certificates.publicKey(url, from('other')))), Array.from({ length: 5 }, () => 'certificate-failed true'), 'five more in the minute after')
  t.same(failures, [`${url.href} HTTP 404`], 'told once')
  now += FAILED_CERT_URL_MS
  await t.rejects(certificates.publicKey(url, from('other')), FeedbackUnavailable)
  t.equal(failures.length, 2, 'and once more when it is fetched again, a minute later, and fails')
  const hanging = await startHost(t, { [pem('f2')]: () => {} }, 'evil.example')
  const slow = certificates.publicKey(hanging.url(pem('f2')), from('slow')).catch(() => {})
  t.same(await reasons([certificates.publicKey(host.url(pem('f3')), from('slow'))]), ['certificate-pending true'], 'a source\'s second URL while its fetch is under way')
  t.teardown(async () => { await slow })
})

t.test('what is not a certificate within the bounds is unavailable, and not fetched again for a minute', async (t) => {
  let now = 1_000_000
  const evil = await startHost(t, { [pem('e1')]: (response) => response.writeHead(200).end(CERT) }, 'evil.example')
  const host = await startHost(t, {
    [pem('a1')]: (response) => response.writeHead(200).end(CERT.padEnd(CERT_MAX_BYTES + 1, '\n')),
    [pem('a2')]: (response) => { response.writeHead(200); response.write(Buffer.alloc(64 * 1024, 'A')); response.write(Buffer.alloc(64 * 1024, 'A')) },
    [pem('a3')]: (response) => { response.writeHead(200); response.write(CERT.slice(0, 100)) },
    [pem('a4')]: () => {},
    [pem('a5')]: (response) => response.writeHead(302, { location: `${evil.origin}${pem('e1')}` }).end(),
    [pem('a6')]: (response) => response.writeHead(301, { location: pem('b0') }).end(),
    [pem('b0')]: (response) => response.writeHead(200).end(CERT),
    [pem('a7')]: (response) => response.writeHead(200).end('-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n'),
    [pem('a8')]: (response) => response.writeHead(200).end('-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n'),
    [pem('a9')]: (response) => response.writeHead(404).end()
  })
  const certificates = new SigningCertificates({ now: () => now, timeoutMs: 300 })
  for (const [index, name] of ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9'].entries()) {
    // One source per URL: the per-source bound is another test's.
    await t.rejects(certificates.publicKey(host.url(pem(name)), from(`s${index}`)), FeedbackUnavailable, name)
  }
  t.same(evil.requests, [], 'a redirect to another host is not followed')
  t.notOk(paths(host).includes(pem('b0')), 'nor one on the same host')
  const fetched = host.requests.length
  await t.rejects(certificates.publicKey(host.url(pem('a9')), from('fresh')), FeedbackUnavailable, 'a URL that just failed')
  t.equal(host.requests.length, fetched, 'is not fetched again')
  now += FAILED_CERT_URL_MS
  await t.rejects(certificates.publicKey(host.url(pem('a9')), from('fresh')), FeedbackUnavailable, 'a minute later')
  t.equal(host.requests.length, fetched + 1, 'it is tried again')
})

t.test('one source starts a few fetches, then one a minute (429 with its wait); other sources are not held back', async (t) => {
  let now = 1_000_000
  const routes: Record<string, Route> = {}
  for (let index = 0; index < 10; index++) routes[pem(`c${index}`)] = (response) => response.writeHead(404).end()
  routes[pem('ab')] = (response) => response.writeHead(200).end(CERT)
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates({ now: () => now })
  for (let index = 0; index < CERT_FETCHES_PER_SOURCE.burst; index++) {
    await t.rejects(certificates.publicKey(host.url(pem(`c${index}`)), from('stranger')), FeedbackUnavailable, `made-up URL ${index}: fetched, and it failed`)
  }
  const throttled = await certificates.publicKey(host.url(pem('c5')), from('stranger')).catch((error: unknown) => error)
  t.ok(throttled instanceof FeedbackThrottled, 'the next made-up URL of the same source is refused')
  t.equal((throttled as FeedbackThrottled).retryAfterSeconds, CERT_FETCHES_PER_SOURCE.refillMs / 1000, 'with the wait for its next token')
  t.equal(host.requests.length, CERT_FETCHES_PER_SOURCE.burst, 'and not fetched')
  t.equal((await certificates.publicKey(host.url(pem('ab')), from('sns'))).asymmetricKeyType, 'rsa', 'another source\'s new certificate is fetched')
  t.equal((await certificates.publicKey(host.url(pem('ab')), from('stranger'))).asymmetricKeyType, 'rsa', 'and a known one is served to the throttled source, without a fetch')
  t.equal(host.requests.length, CERT_FETCHES_PER_SOURCE.burst + 1)
  now += CERT_FETCHES_PER_SOURCE.refillMs
  await t.rejects(certificates.publicKey(host.url(pem('c5')), from('stranger')), FeedbackUnavailable, 'a minute later, one more fetch')
  await t.rejects(certificates.publicKey(host.url(pem('c6')), from('stranger')), FeedbackThrottled, 'and only one')
})

t.test('fetches in flight are bounded, whoever asks', async (t) => {
  const stalled: ServerResponse[] = []
  const routes: Record<string, Route> = {}
  for (let index = 0; index <= CERT_FETCHES_IN_FLIGHT; index++) routes[pem(`d${index}`)] = (response) => { stalled.push(response) }
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates({ timeoutMs: 60_000 })
  const pending = Array.from({ length: CERT_FETCHES_IN_FLIGHT }, async (_, index) => await certificates.publicKey(host.url(pem(`d${index}`)), from(`s${index}`)).catch((error: unknown) => error))
  const deadline = Date.now() + 10_000
  while (host.requests.length < CERT_FETCHES_IN_FLIGHT && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
  await t.rejects(certificates.publicKey(host.url(pem(`d${CERT_FETCHES_IN_FLIGHT}`)), from('late')), FeedbackUnavailable, 'one more while they hang: 503')
  t.equal(host.requests.length, CERT_FETCHES_IN_FLIGHT, 'not fetched')
  for (const response of stalled) response.destroy()
  t.ok((await Promise.all(pending)).every((error) => error instanceof FeedbackUnavailable), 'the hanging fetches fail when their peer goes')
})

t.test('strangers naming made-up URLs from many sources cannot keep a new instance from fetching SNS\'s certificate', async (t) => {
  let now = 1_000_000
  const routes: Record<string, Route> = { [pem('ab')]: (response) => response.writeHead(200).end(CERT) }
  const strangers = 40
  for (let index = 0; index < strangers * CERT_FETCHES_PER_SOURCE.burst; index++) routes[pem(`e${index.toString(16)}`)] = (response) => response.writeHead(404).end()
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates({ now: () => now })
  // At the start of a minute every stranger spends its whole burst on made-up URLs, one after another.
  const outcomes: string[] = []
  for (let index = 0; index < strangers * CERT_FETCHES_PER_SOURCE.burst; index++) {
    const stranger = `stranger-${Math.floor(index / CERT_FETCHES_PER_SOURCE.burst)}`
    outcomes.push(await certificates.publicKey(host.url(pem(`e${index.toString(16)}`)), from(stranger)).then(() => 'fetched', (error: unknown) => error instanceof FeedbackThrottled ? 'throttled' : 'failed'))
  }
  t.notOk(outcomes.includes('fetched'), 'no made-up URL served a key')
  now += 10_000
  t.equal((await certificates.publicKey(host.url(pem('ab')), from('sns'))).asymmetricKeyType, 'rsa', 'SNS\'s certificate is fetched at its first message')
  const fetches = host.requests.length
  await certificates.publicKey(host.url(pem('ab')), from('sns-elsewhere'))
  t.equal(host.requests.length, fetches, 'and served from memory after')
})

t.test('a certificate whose day is up is fetched again even while strangers spend its source\'s tokens; if it is gone, it is trusted no more', async (t) => {
  let now = 1_000_000
  let served = true
  const routes: Record<string, Route> = { [pem('ab')]: (response) => { if (served) response.writeHead(200).end(CERT); else response.writeHead(404).end() } }
  for (let index = 0; index < 40; index++) routes[pem(`e${index.toString(16)}`)] = (response) => response.writeHead(404).end()
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates({ now: () => now })
  await certificates.publicKey(host.url(pem('ab')), from('sns'))
  now += CERT_KEPT_MS
  // Made-up URLs spend SNS's own source's tokens (its address is shared with strangers).
  for (let index = 0; index < CERT_FETCHES_PER_SOURCE.burst; index++) await t.rejects(certificates.publicKey(host.url(pem(`e${(20 + index).toString(16)}`)), from('sns')), FeedbackUnavailable)
  await t.rejects(certificates.publicKey(host.url(pem('e1e')), from('sns')), FeedbackThrottled, 'SNS\'s source may start no new fetch')
  const before = host.requests.length
  t.equal((await certificates.publicKey(host.url(pem('ab')), from('sns'))).asymmetricKeyType, 'rsa', 'SNS\'s certificate is renewed all the same')
  t.equal(host.requests.length, before + 1, 'by a fetch')
  now += CERT_KEPT_MS
  served = false
  await t.rejects(certificates.publicKey(host.url(pem('ab')), from('sns')), FeedbackUnavailable, 'a day later it is gone: its old key is not used')
})

t.test('a sender without a bucket of its own (every caller through the sidecar without an identity) spends no tokens, one fetch at a time', async (t) => {
  const routes: Record<string, Route> = { [pem('ab')]: (response) => response.writeHead(200).end(CERT) }
  for (let index = 0; index < 10; index++) routes[pem(`c${index}`)] = (response) => response.writeHead(404).end()
  const host = await startHost(t, routes)
  const certificates = new SigningCertificates()
  // A stranger behind the same sidecar spends more than any bucket's burst on made-up URLs.
  for (let index = 0; index < 10; index++) await t.rejects(certificates.publicKey(host.url(pem(`c${index}`)), UNIDENTIFIED), FeedbackUnavailable, 'a failed fetch, never a 429')
  t.equal((await certificates.publicKey(host.url(pem('ab')), UNIDENTIFIED)).asymmetricKeyType, 'rsa', 'SNS\'s certificate through the same sidecar is still fetched')
})

t.test('one source has one new fetch under way at a time: the next is 503 and spends no token; a renewal and a shared fetch are no source\'s', async (t) => {
  let now = 1_000_000
  const stalled: ServerResponse[] = []
  const notFound: Route = (response) => response.writeHead(404).end()
  const host = await startHost(t, {
    [pem('f0')]: (response) => { stalled.push(response) },
    [pem('f1')]: notFound,
    [pem('f2')]: notFound,
    [pem('f3')]: notFound,
    [pem('f4')]: notFound,
    [pem('ab')]: (response) => response.writeHead(200).end(CERT)
  })
  const certificates = new SigningCertificates({ now: () => now, timeoutMs: 60_000 })
  const hangs = async (count: number): Promise<void> => {
    const deadline = Date.now() + 10_000
    while (stalled.length < count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
  }
  await certificates.publicKey(host.url(pem('ab')), from('sns'))
  const hanging = certificates.publicKey(host.url(pem('f0')), from('stranger')).catch((error: unknown) => error)
  await hangs(1)
  await t.rejects(certificates.publicKey(host.url(pem('f1')), from('stranger')), FeedbackUnavailable, 'a second new URL of the same source while its first hangs: 503')
  const sharing = certificates.publicKey(host.url(pem('f0')), from('stranger')).catch((error: unknown) => error)
  await t.rejects(certificates.publicKey(host.url(pem('f1')), UNIDENTIFIED), FeedbackUnavailable, 'another source\'s new URL is fetched (and fails)')
  t.same(paths(host).filter((path) => path === pem('f1')), [pem('f1')], 'the refused URL was fetched only for the other source')
  for (const response of stalled.splice(0)) response.destroy()
  t.ok((await hanging) instanceof FeedbackUnavailable && (await sharing) instanceof FeedbackUnavailable, 'the hanging fetch fails for both who waited on it')
  for (const name of ['f2', 'f3']) await t.rejects(certificates.publicKey(host.url(pem(name)), from('stranger')), FeedbackUnavailable, `its fetch over, the source starts another (${name})`)
  await t.rejects(certificates.publicKey(host.url(pem('f4')), from('stranger')), FeedbackThrottled, 'then its burst is spent by f0, f2 and f3: the 503 took no token')
  now += CERT_KEPT_MS
  const again = certificates.publicKey(host.url(pem('f0')), from('stranger')).catch((error: unknown) => error)
  await hangs(1)
  t.equal((await certificates.publicKey(host.url(pem('ab')), from('stranger'))).asymmetricKeyType, 'rsa', 'a renewal asked for by a source whose fetch hangs is fetched: it is no source\'s')
  for (const response of stalled) response.destroy()
  t.ok((await again) instanceof FeedbackUnavailable)
})
