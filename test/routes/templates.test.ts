import t, { type Test } from 'tap'
import { bearer, buildApp, writeTenants } from '../helper.js'
import { sesStore, startSesLocal, startSmtp } from '../support/mail-peers.js'
import type { TenantsFile } from '../../schemas/tenants.js'

// The SDK reads credentials from its standard chain; the emulator accepts any.
process.env.AWS_ACCESS_KEY_ID = 'test'
process.env.AWS_SECRET_ACCESS_KEY = 'test'

const codeIn = (text: string | undefined): string => /\b(\d{6})\b/.exec(text ?? '')?.[1] ?? ''

/**
 * acme writes its own mail in French and German (files in its template folder and inline),
 * with constants; its brand and one constant try to inject markup.
 */
function brandedTenants (t: Test): ReturnType<typeof writeTenants> {
  t.testdir({
    templates: {
      acme: {
        mail: {
          'fr.html.liquid': '<!DOCTYPE html><html lang="{{ locale }}"><body><h1>{{ brand }}</h1><p>Votre code&nbsp;: <strong>{{ code }}</strong></p><p>Il expire dans {{ minutes }} minutes.</p><footer>{{ constants.legal }} · <a href="{{ constants.support }}">Aide</a></footer></body></html>\n',
          'fr.txt.liquid': 'Bonjour,\n\nVotre code {{ brand }} : {{ code }}\nIl expire dans {{ minutes }} minutes.\n\n{{ constants.legal }}\n'
        }
      }
    }
  })
  return writeTenants(t, (file: TenantsFile) => {
    const acme = file.tenants[0]!
    acme.brand = { name: 'Acme <b>Bank</b>', from: 'codes@acme.test' }
    acme.constants = { legal: 'Acme SA <script>alert(1)</script>', support: 'https://help.acme.test/?a=1&b=2' }
    acme.templates = {
      fr: { subject: 'Connexion à {{ brand }}', text: { file: 'mail/fr.txt.liquid' }, html: { file: 'mail/fr.html.liquid' } },
      de: { subject: 'Anmeldung bei {{ brand }}', text: 'Ihr Code: {{ code }}\n{{ constants.legal }}\n', html: '<html lang="de"><p>Ihr Code: <b>{{ code }}</b></p><small>{{ constants.legal }}</small></html>' }
    }
  })
}

function assertFrench (t: Test, message: { subject: string, text: string, html: string }): void {
  const code = codeIn(message.text)
  t.match(code, /^\d{6}$/, 'French: the text part carries the code')
  t.equal(message.subject, 'Connexion à Acme <b>Bank</b>', 'French: the tenant\'s subject (a header: not markup)')
  t.equal(message.text, `Bonjour,\n\nVotre code Acme <b>Bank</b> : ${code}\nIl expire dans 10 minutes.\n\nAcme SA <script>alert(1)</script>\n`, 'French: the tenant\'s text part')
  t.match(message.html, `<p>Votre code&nbsp;: <strong>${code}</strong></p>`, 'French: the tenant\'s HTML part, with the same code')
  t.match(message.html, '<h1>Acme &lt;b&gt;Bank&lt;/b&gt;</h1>', 'the brand is escaped in HTML')
  t.match(message.html, '<footer>Acme SA &lt;script&gt;alert(1)&lt;/script&gt; · <a href="https://help.acme.test/?a=1&amp;b=2">Aide</a></footer>', 'constants are escaped in HTML')
  t.notMatch(message.html, /<script|<b>Bank/)
}

function assertGerman (t: Test, message: { subject: string, text: string, html: string }): void {
  const code = codeIn(message.text)
  t.equal(message.subject, 'Anmeldung bei Acme <b>Bank</b>')
  t.equal(message.text, `Ihr Code: ${code}\nAcme SA <script>alert(1)</script>\n`)
  t.equal(message.html, `<html lang="de"><p>Ihr Code: <b>${code}</b></p><small>Acme SA &lt;script&gt;alert(1)&lt;/script&gt;</small></html>`)
}

// 92 s of tap's 180 at a load of 13-18 on 2 cores: its own bound, with room for a slower day.
t.setTimeout(420_000)

t.test('SES: a tenant\'s own mail in two languages, through the SES v2 emulator', async (t) => {
  const ses = await startSesLocal(t)
  const { path, keys } = brandedTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'ses', AWS_REGION: 'eu-west-1', AWS_ENDPOINT_URL_SESV2: ses, MAIL_FROM: 'no-reply@otp.test' })

  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'kim@example.com', locale: 'fr' } })
  t.equal(sent.statusCode, 200)
  await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeLive), 'accept-language': 'de-AT, fr;q=0.5' }, payload: { email: 'lu@example.com' } })
  await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email: 'es@example.com', locale: 'es' } })
  const store = await sesStore(ses)
  const to = (address: string) => store.find((email) => email.destination.to[0] === address)!
  const french = to('kim@example.com')
  assertFrench(t, { subject: french.subject, text: french.body.text ?? '', html: french.body.html ?? '' })
  t.match(french.from, 'codes@acme.test')
  const german = to('lu@example.com')
  assertGerman(t, { subject: german.subject, text: german.body.text ?? '', html: german.body.html ?? '' })
  const spanish = to('es@example.com')
  t.equal(spanish.subject, 'Tu código de verificación de Acme <b>Bank</b>', 'a language the tenant did not write: the built-in wording')

  const code = codeIn(french.body.text)
  const verified = await app.inject({ method: 'POST', url: '/otp/verify', headers: bearer(keys.acmeLive), payload: { requestId: sent.json().data.requestId, userGuess: code } })
  t.equal(verified.statusCode, 200, 'the code in the tenant\'s mail verifies')

  const globex = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.globexTest), payload: { email: 'gx@example.com', locale: 'fr' } })
  t.equal(globex.statusCode, 200)
  const [other] = (await app.inject({ method: 'GET', url: '/sandbox/messages?email=gx@example.com', headers: bearer(keys.globexTest) })).json().data.messages
  t.equal(other.subject, 'Votre code de vérification globex', 'another tenant keeps the built-in wording')
})

t.test('SMTP: the same tenant\'s own mail through a real SMTP server', async (t) => {
  const peer = await startSmtp(t)
  const { path, keys } = brandedTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, MAIL_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${peer.port}?tls=off`, MAIL_FROM: 'no-reply@otp.test' })
  for (const [email, locale] of [['ana@example.com', 'fr-CA'], ['ben@example.com', 'de']]) {
    t.equal((await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeLive), payload: { email, locale } })).statusCode, 200)
  }
  const [french, german] = peer.received
  assertFrench(t, { subject: french?.subject ?? '', text: french?.text ?? '', html: String(french?.html) })
  assertGerman(t, { subject: german?.subject ?? '', text: german?.text ?? '', html: String(german?.html) })
})

t.test('the sandbox inbox shows the tenant\'s rendered message', async (t) => {
  const { path, keys } = brandedTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path })
  const sent = await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeTest), 'accept-language': 'fr-FR' }, payload: { email: 'max@example.com' } })
  t.equal(sent.statusCode, 200)
  const [message] = (await app.inject({ method: 'GET', url: '/sandbox/messages?email=max@example.com', headers: bearer(keys.acmeTest) })).json().data.messages
  assertFrench(t, message)
  t.equal(codeIn(message.text), message.code)
  t.match(mail.text, 'Subject: Connexion à Acme <b>Bank</b>', 'and the log mailer prints it')
})

t.test('POST /templates/preview', async (t) => {
  const { path, keys } = brandedTenants(t)
  const { app, mail } = await buildApp(t, { TENANTS_FILE: path })
  const preview = async (key: string, payload: object, headers: Record<string, string> = {}) =>
    await app.inject({ method: 'POST', url: '/templates/preview', headers: { ...bearer(key), ...headers }, payload })

  const french = await preview(keys.acmeLive, { locale: 'fr', code: '042917', minutes: 10 })
  t.equal(french.statusCode, 200)
  t.equal(french.json().message, 'Message rendered; nothing was sent')
  t.equal(french.json().data.locale, 'fr')
  t.same(french.json().data.customParts, ['subject', 'text', 'html'])
  assertFrench(t, french.json().data)
  t.match(french.json().data.html, '<strong>042917</strong>', 'the sample code')

  const sandbox = await preview(keys.acmeTest, { locale: 'de-CH', minutes: 3 })
  t.equal(sandbox.statusCode, 200, 'sandbox secret keys too')
  t.equal(sandbox.json().data.locale, 'de', 'matched as dispatch matches')
  t.match(sandbox.json().data.text, 'Ihr Code: 123456', 'the default sample code')

  const byDefault = (await preview(keys.acmeLive, {})).json().data
  t.equal(byDefault.locale, 'en', 'the tenant\'s default language')
  t.same(byDefault.customParts, [])
  t.equal(byDefault.subject, 'Your Acme <b>Bank</b> verification code')
  t.match(byDefault.text, 'It expires in 10 minutes.', 'the service\'s code lifetime')

  const unknown = await preview(keys.acmeLive, { locale: 'ja' })
  t.equal(unknown.statusCode, 400)
  t.same(unknown.json(), { success: false, message: 'The tenant has no message wording in ja; it has en, fr, de, es', code: 'LOCALE_NOT_AVAILABLE' })

  const restricted = await preview(keys.acmeBrowser, {}, { origin: 'https://app.acme.test' })
  t.equal(restricted.statusCode, 403)
  t.equal(restricted.json().code, 'KEY_NOT_PERMITTED')
  for (const body of [{ code: '12345' }, { minutes: 0 }, { locale: 'x' }, { brand: 'Evil' }]) {
    const refused = await preview(keys.acmeLive, body)
    t.equal(refused.json().code, 'INVALID_BODY', JSON.stringify(body))
  }
  t.equal(mail.count, 0, 'nothing was sent')
  const usage = (await app.inject({ method: 'GET', url: '/usage', headers: bearer(keys.acmeLive) })).json().data
  t.same([usage.live.used, usage.sandbox.used], [0, 0], 'nothing was charged')
})

t.test('a tenant with its own default language and a language the service does not have', async (t) => {
  const { path, keys } = writeTenants(t, (file) => {
    file.tenants[0]!.defaultLocale = 'it'
    file.tenants[0]!.templates = { it: { subject: 'Il tuo codice {{ brand }}', text: 'Codice: {{ code }}', html: '<p>{{ code }}</p>' } }
  })
  const { app } = await buildApp(t, { TENANTS_FILE: path })
  const dispatch = async (payload: object, headers: Record<string, string> = {}): Promise<string> => {
    const email = `p${Math.random().toString(36).slice(2)}@example.com`
    await app.inject({ method: 'POST', url: '/otp/request', headers: { ...bearer(keys.acmeTest), ...headers }, payload: { email, ...payload } })
    return (await app.inject({ method: 'GET', url: `/sandbox/messages?email=${email}`, headers: bearer(keys.acmeTest) })).json().data.messages[0].subject
  }
  t.equal(await dispatch({}), 'Il tuo codice Acme', 'nothing asked: the tenant\'s default')
  t.equal(await dispatch({}, { 'accept-language': 'ja, nl;q=0.5' }), 'Il tuo codice Acme', 'nothing available asked: the tenant\'s default')
  t.equal(await dispatch({ locale: 'it-CH' }), 'Il tuo codice Acme')
  t.equal(await dispatch({}, { 'accept-language': 'fr-CH, it;q=0.9' }), 'Votre code de vérification Acme', 'Accept-Language picks the best')
  t.equal(await dispatch({ locale: 'es' }, { 'accept-language': 'it' }), 'Tu código de verificación de Acme', 'the body before the header')
  t.equal((await app.inject({ method: 'POST', url: '/templates/preview', headers: bearer(keys.acmeLive), payload: {} })).json().data.locale, 'it')
})

t.test('a refused template refuses its tenant alone, named by its place in the file', async (t) => {
  const { path, keys } = writeTenants(t, (file) => { file.tenants[0]!.templates = { en: { subject: 'Your code is {{ code }}' } } })
  const { app, logs } = await buildApp(t, { TENANTS_FILE: path })
  const refused = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.acmeTest), payload: { email: 'someone@acme.test' } })
  t.same({ status: refused.statusCode, code: refused.json().code }, { status: 503, code: 'TENANT_MISCONFIGURED' }, 'the tenant\'s keys answer 503')
  t.match(logs.text, /\/tenants\/0\/templates\/en\/subject \(tenant acme, locale en, subject\): the subject must not contain the code/, 'the log names the place and the reason')
  const other = await app.inject({ method: 'POST', url: '/otp/request', headers: bearer(keys.globexTest), payload: { email: 'someone@globex.test' } })
  t.equal(other.statusCode, 200, 'the other tenant is served')
})

t.test('previews are limited per tenant, all its keys together, and render one at a time per tenant', async (t) => {
  const { path, keys } = brandedTenants(t)
  const { app } = await buildApp(t, { TENANTS_FILE: path, RATE_LIMIT_PREVIEW: '3/1m' })
  const preview = async (key: string) => await app.inject({ method: 'POST', url: '/templates/preview', headers: bearer(key), payload: { locale: 'fr' } })

  const answers = []
  for (const key of [keys.acmeLive, keys.acmeTest, keys.acmeLive, keys.acmeTest]) answers.push(await preview(key))
  t.same(answers.map((answer) => answer.statusCode), [200, 200, 200, 429], 'the tenant\'s fourth preview in the window, whichever key asks')
  const refused = answers[3]!
  t.equal(refused.json().code, 'RATE_LIMITED')
  t.match(refused.json().message, /^Too many previews for this tenant; retry in \d+ s$/)
  t.match(refused.headers['retry-after'], /^\d+$/)
  t.equal((await preview(keys.globexTest)).statusCode, 200, 'another tenant is not affected')

  const { app: relaxed } = await buildApp(t, { TENANTS_FILE: path })
  const together = await Promise.all([keys.acmeLive, keys.acmeTest, keys.globexTest].map(async (key) =>
    await relaxed.inject({ method: 'POST', url: '/templates/preview', headers: bearer(key), payload: { locale: 'fr' } })))
  t.same(together.slice(0, 2).map((answer) => answer.statusCode).sort(), [200, 429], 'two previews of one tenant at once: the second is refused at once')
  const busy = together.find((answer) => answer.statusCode === 429)
  t.same(busy?.json(), { success: false, message: 'Another preview of this tenant is being rendered; retry once it is done', code: 'RATE_LIMITED' })
  t.equal(busy?.headers['retry-after'], '1')
  t.equal(together[2]?.statusCode, 200, 'another tenant\'s preview at the same time is served')
  t.equal((await relaxed.inject({ method: 'POST', url: '/templates/preview', headers: bearer(keys.acmeTest), payload: { locale: 'fr' } })).statusCode, 200, 'the slot is free again once the preview is done')
})
