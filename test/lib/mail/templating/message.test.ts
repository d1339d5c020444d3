import t from 'tap'
import { composeVerificationMessage, escapeHtml, type VerificationMessageInput } from '../../../../lib/mail/templating/message.js'
import { SUPPORTED_LOCALES, negotiateLocale, type Locale } from '../../../../lib/mail/templating/locale.js'

const CODE = '482910'

function compose (overrides: Partial<VerificationMessageInput> = {}): ReturnType<typeof composeVerificationMessage> {
  return composeVerificationMessage({
    to: 'person@example.com',
    from: 'Acme <no-reply@acme.test>',
    brand: 'Acme',
    code: CODE,
    ttlSeconds: 600,
    locale: 'en',
    tags: { tenant: 'acme', mode: 'live' },
    ...overrides
  })
}

const EXPECTED: Record<Locale, { subject: string, one: string, ten: string, text: string }> = {
  en: {
    subject: 'Your Acme verification code',
    one: 'It expires in 1 minute.',
    ten: 'It expires in 10 minutes.',
    text: `Your Acme verification code is ${CODE}.\n\nIt expires in 10 minutes.\n\nIf you didn\u2019t request this, you can ignore this email.\n`
  },
  fr: {
    subject: 'Votre code de vérification Acme',
    one: 'Il expire dans 1 minute.',
    ten: 'Il expire dans 10 minutes.',
    text: `Votre code de vérification Acme est ${CODE}.\n\nIl expire dans 10 minutes.\n\n` +
      'Si vous n\u2019êtes pas à l\u2019origine de cette demande, vous pouvez ignorer cet e-mail.\n'
  },
  de: {
    subject: 'Ihr Bestätigungscode für Acme',
    one: 'Er ist 1 Minute gültig.',
    ten: 'Er ist 10 Minuten gültig.',
    text: `Ihr Bestätigungscode für Acme lautet ${CODE}.\n\nEr ist 10 Minuten gültig.\n\n` +
      'Falls Sie diesen Code nicht angefordert haben, können Sie diese E-Mail ignorieren.\n'
  },
  es: {
    subject: 'Tu código de verificación de Acme',
    one: 'Caduca en 1 minuto.',
    ten: 'Caduca en 10 minutos.',
    text: `Tu código de verificación de Acme es ${CODE}.\n\nCaduca en 10 minutos.\n\n` +
      'Si no has solicitado este código, puedes ignorar este correo.\n'
  }
}

t.same(SUPPORTED_LOCALES, ['en', 'fr', 'de', 'es'])

t.test('every locale renders code, lifetime and brand', async (t) => {
  for (const locale of SUPPORTED_LOCALES) {
    const expected = EXPECTED[locale]
    const ten = compose({ locale, ttlSeconds: 600 })
    t.equal(ten.subject, expected.subject, `${locale}: subject`)
    t.notMatch(ten.subject, CODE, `${locale}: no code in the subject`)
    t.equal(ten.text, expected.text, `${locale}: text`)
    t.match(ten.html, `<html lang="${locale}">`, `${locale}: html lang`)
    t.match(ten.html, `>${CODE}</p>`, `${locale}: code block in the html`)
    t.match(ten.html, escapeHtml(expected.ten), `${locale}: plural minutes in the html`)
    t.match(ten.html, 'Acme', `${locale}: brand in the html`)
    t.match(ten.html, 'monospace', `${locale}: code in a monospace block`)

    const one = compose({ locale, ttlSeconds: 60 })
    t.match(one.text, expected.one, `${locale}: singular minute in the text`)
    t.match(one.html, escapeHtml(expected.one), `${locale}: singular minute in the html`)
  }
})

t.test('the lifetime is rounded down, never below one minute', async (t) => {
  t.match(compose({ ttlSeconds: 90 }).text, 'It expires in 1 minute.')
  t.match(compose({ ttlSeconds: 30 }).text, 'It expires in 1 minute.')
  t.match(compose({ ttlSeconds: 179 }).text, 'It expires in 2 minutes.')
  t.throws(() => compose({ ttlSeconds: 0 }), RangeError)
  t.throws(() => compose({ ttlSeconds: Number.NaN }), RangeError)
})

t.test('addresses and tags pass through; reply-to only when given', async (t) => {
  const plain = compose()
  t.equal(plain.to, 'person@example.com')
  t.equal(plain.from, 'Acme <no-reply@acme.test>')
  t.notOk('replyTo' in plain, 'no replyTo key without one')
  t.same(plain.tags, { tenant: 'acme', mode: 'live' })

  const tags = { tenant: 'acme' }
  const withReply = compose({ replyTo: 'support@acme.test', tags })
  t.equal(withReply.replyTo, 'support@acme.test')
  tags.tenant = 'changed'
  t.equal(withReply.tags.tenant, 'acme', 'tags are copied')
})

t.test('a hostile brand renders inert in HTML', async (t) => {
  const brand = '<script>alert("x")</script> & \'q\''
  for (const locale of SUPPORTED_LOCALES) {
    const message = compose({ brand, locale })
    t.notMatch(message.html, '<script', `${locale}: no script element`)
    t.notMatch(message.html, 'alert("x")', `${locale}: quotes escaped`)
    t.match(message.html, '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;', `${locale}: escaped brand`)
    t.match(message.text, brand, `${locale}: the text part keeps the brand as written`)
  }
})

t.test('control characters in the brand cannot reach the subject', async (t) => {
  const message = compose({ brand: 'Acme\r\nBcc: attacker@evil.test\r\n\r\nbody' })
  t.notMatch(message.subject, /[\r\n]/, 'no CR or LF')
  t.equal(message.subject, 'Your Acme Bcc: attacker@evil.test body verification code')

  const odd = compose({ brand: '\tAc\u0000me\u007f\u0085\u2028Corp\u202e\u2066  ' })
  t.equal(odd.subject, 'Your Ac me Corp verification code', 'C0, C1, separators and bidi controls')
  t.notMatch(odd.html, /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u2028\u202e\u2066]/, 'not in the html either')
  t.notMatch(odd.text, /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u202e\u2066]/, 'not in the text either')

  t.throws(() => compose({ brand: '\r\n\u0000 ' }), TypeError, 'a brand of nothing but controls is refused')
})

t.test('addresses with control characters are refused without echoing them', async (t) => {
  for (const field of ['to', 'from', 'replyTo'] as const) {
    let thrown: unknown
    try {
      compose({ [field]: 'person@example.com\r\nBcc: attacker@evil.test' })
    } catch (error) {
      thrown = error
    }
    t.type(thrown, TypeError, `${field}: refused`)
    t.notMatch(String(thrown), 'example.com', `${field}: value not echoed`)
  }
})

t.test('escapeHtml', async (t) => {
  t.equal(escapeHtml('&<>"\''), '&amp;&lt;&gt;&quot;&#39;')
  t.equal(escapeHtml('plain text, é ü ñ'), 'plain text, é ü ñ')
  t.equal(escapeHtml('&amp;'), '&amp;amp;', 'not idempotent: escape once, where the value is output')
})

t.test('negotiateLocale', async (t) => {
  const cases: Array<[string | undefined, string | undefined, Locale, string]> = [
    [undefined, undefined, 'en', 'nothing at all'],
    ['fr', undefined, 'fr', 'explicit'],
    ['fr-CA', undefined, 'fr', 'explicit with region'],
    ['FR-ca', undefined, 'fr', 'explicit, case-insensitive'],
    ['de_DE', undefined, 'de', 'explicit, POSIX spelling'],
    [' es ', undefined, 'es', 'explicit, padded'],
    ['fr', 'de', 'fr', 'explicit beats Accept-Language'],
    ['zh', 'de', 'de', 'unsupported explicit falls through'],
    ['zh-Hant-TW', undefined, 'en', 'unsupported explicit, no header'],
    ['', 'es', 'es', 'empty explicit'],
    ['*', 'de', 'de', 'wildcard is not an explicit choice'],
    ['fr;q=1', 'de', 'de', 'malformed explicit'],
    ['f'.repeat(100), 'de', 'de', 'overlong explicit'],
    [undefined, 'de', 'de', 'single language'],
    [undefined, 'de-CH;q=0.9, fr;q=0.8', 'de', 'highest q wins'],
    [undefined, 'fr;q=0.8, de-CH;q=0.9', 'de', 'order does not beat q'],
    [undefined, 'de, fr', 'de', 'ties go to the first'],
    [undefined, 'ja, zh;q=0.9, es;q=0.5', 'es', 'unsupported ranges skipped'],
    [undefined, 'ja, *;q=0.5, fr;q=0.4', 'en', 'wildcard above the supported one means the default'],
    [undefined, 'ja, fr;q=0.6, *;q=0.5', 'fr', 'wildcard below the supported one'],
    [undefined, '*', 'en', 'wildcard alone'],
    [undefined, 'fr;q=0, de;q=0.1', 'de', 'q=0 is not acceptable'],
    [undefined, 'fr;q=2, es', 'es', 'out-of-range q skipped'],
    [undefined, 'fr;q=0.1234, es;q=0.1', 'es', 'too many decimals skipped'],
    [undefined, 'fr;q=abc, de;q=0.3', 'de', 'non-numeric q skipped'],
    [undefined, 'fr;level=1;q=0.5, de;q=0.4', 'fr', 'extra parameters tolerated'],
    [undefined, 'FR-ca;Q=0.7 , DE ; q=0.6', 'fr', 'case and whitespace'],
    [undefined, 'de-CH', 'de', 'region subtag'],
    [undefined, ';;;,,,=,q=1', 'en', 'garbage'],
    [undefined, '\u0000fr, fr\u0000', 'en', 'control characters'],
    [undefined, 'français, 12345, fr-', 'en', 'not language ranges'],
    [undefined, '', 'en', 'empty header']
  ]
  for (const [explicit, header, expected, label] of cases) {
    t.equal(negotiateLocale(explicit, header), expected, label)
  }
})

t.test('negotiateLocale does bounded work on hostile headers', async (t) => {
  // A stall guard on the CPU time the work took (a busy machine lengthens only the wall clock),
  // not a measurement: `npm run bench:templates` measures.
  const STALL_GUARD_MS = 2000
  const cpuMs = (work: () => void): number => {
    const start = process.cpuUsage()
    work()
    const used = process.cpuUsage(start)
    return (used.user + used.system) / 1000
  }
  const tenThousand = Array.from({ length: 10_000 }, (_, i) => `x${i % 10}-yy;q=0.${i % 10}`).join(', ')

  t.ok(cpuMs(() => { t.equal(negotiateLocale(undefined, `${tenThousand}, fr`), 'en', 'entries past the cap are not read') }) < STALL_GUARD_MS, 'no stall')
  t.ok(cpuMs(() => { t.equal(negotiateLocale(undefined, `de;q=0.5, ${tenThousand}`), 'de', 'entries before the cap are read') }) < STALL_GUARD_MS, 'no stall')
  t.ok(cpuMs(() => {
    t.equal(negotiateLocale(undefined, ';'.repeat(1_000_000) + ',fr'), 'en', 'one huge entry')
    t.equal(negotiateLocale(undefined, 'fr' + ';q=1'.repeat(250_000)), 'en', 'an entry cut by the length cap is malformed, dropped')
  }) < STALL_GUARD_MS, 'no stall')
})
