import t from 'tap'
import { bearer, buildApp, writeTenants } from '../helper.js'
import { listenApp, send } from '../support/http.js'

/*
 * The mailbox cap counts every tenant's codes to one mailbox. Its 429 used to carry the cap's
 * own figures (RateLimit-Limit 15, the exact Reset), telling another tenant's secret key how
 * many codes others sent to that mailbox and when. It now answers in the shape of the tenant's
 * own recipient limit, with the cap's whole window as Retry-After.
 */
t.test('the mailbox cap\'s 429 tells another tenant nothing of the others\' count or timing', async (t) => {
  const { path, keys } = writeTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_RECIPIENT: '4/15m', RATE_LIMIT_MAILBOX: '6/15m' })
  const port = await listenApp(app)
  const dispatch = async (key: string, email: string) => await send({ port, path: '/otp/request', headers: { ...bearer(key), 'content-type': 'application/json' }, body: JSON.stringify({ email }) })

  // acme sends four codes to X; globex then one (its first): the cap (6) is not reached yet.
  for (let i = 0; i < 4; i++) t.equal((await dispatch(keys.acmeTest, 'x@example.com')).status, 200)
  const first = await dispatch(keys.globexTest, 'x@example.com')
  t.same([first.status, first.headers['ratelimit-limit'], first.headers['ratelimit-remaining']], [200, '4', '3'], 'allowed: globex\'s own recipient limit, never the cap\'s')
  t.equal((await dispatch(keys.globexTest, 'x@example.com')).status, 200)
  const capped = await dispatch(keys.globexTest, 'x@example.com')
  t.equal(capped.status, 429)
  t.same([capped.body.code, capped.body.message], ['RATE_LIMITED', 'Too many requests for this recipient; retry in 900 s'])
  t.same(
    [capped.headers['retry-after'], capped.headers['ratelimit-limit'], capped.headers['ratelimit-remaining'], capped.headers['ratelimit-reset']],
    ['900', '4', '0', '900'],
    'the recipient limit\'s figure and the cap\'s whole window: not 6, not when the others\' first code was sent'
  )

  // Its own recipient limit's 429 has the same headers.
  for (let i = 0; i < 4; i++) await dispatch(keys.globexTest, 'y@example.com')
  const own = await dispatch(keys.globexTest, 'y@example.com')
  t.equal(own.status, 429)
  t.same(Object.keys(capped.headers).filter((name) => name.startsWith('ratelimit') || name === 'retry-after').sort(), Object.keys(own.headers).filter((name) => name.startsWith('ratelimit') || name === 'retry-after').sort(), 'the same header names')
  t.match(own.body.message, /^Too many requests for this recipient; retry in \d+ s$/)
})
