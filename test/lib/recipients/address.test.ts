import t from 'tap'
import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import { validateEmail, validateEmailWithParser } from '../../../lib/recipients/address.js'

t.test('accepted addresses, their delivery form and canonical form', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['ada@example.com', 'ada@example.com', 'ada@example.com'],
    ['  Ada.Lovelace@Example.COM\t', 'Ada.Lovelace@example.com', 'ada.lovelace@example.com'],
    ['Victim+promo@Example.com', 'Victim+promo@example.com', 'victim@example.com'],
    ["o'brien#$&*=^_`{|}~-@x.co", "o'brien#$&*=^_`{|}~-@x.co", "o'brien#$&*=^_`{|}~-@x.co"],
    ['a/b@x.co', 'a/b@x.co', 'a/b@x.co'],
    ['user@bücher.example', 'user@xn--bcher-kva.example', 'user@xn--bcher-kva.example'],
    ['user@BÜCHER.example', 'user@xn--bcher-kva.example', 'user@xn--bcher-kva.example']
  ]
  for (const [input, address, canonical] of cases) {
    const result = validateEmail(input)
    t.ok(result.ok, JSON.stringify(input))
    if (result.ok) {
      t.equal(result.email.address, address)
      t.equal(result.email.canonical, canonical)
    }
  }
})

t.test('rejected addresses say why', async (t) => {
  const cases: Array<[string, string]> = [
    ['a@b.c\r\nBcc: x@y.com', 'control_character'],
    ['a@x.com\u0000', 'control_character'],
    ['a\u2028@x.com', 'control_character'],
    ['"a b"@x.com', 'quoted_local_part'],
    ['"a"@x.com', 'quoted_local_part'],
    ['a@x.com(evil.com)', 'comment_or_whitespace'],
    ['(c)a@x.com', 'comment_or_whitespace'],
    ['a @x.com', 'comment_or_whitespace'],
    ['a@@b', 'syntax'],
    ['a.@x.com', 'syntax'],
    ['.a@x.com', 'syntax'],
    ['a..b@x.com', 'syntax'],
    ['', 'syntax'],
    ['plainaddress', 'syntax'],
    ['Ünïcode@bücher.example', 'non_ascii_local_part'],
    ['Bob <bob@x.com>', 'display_name_or_group'],
    ['g: a@x.com;', 'display_name_or_group'],
    ['a@[127.0.0.1]', 'domain_literal'],
    ['a@localhost', 'invalid_domain'],
    ['a@1.2.3.4', 'invalid_domain'],
    ['a@-x.com', 'invalid_domain'],
    [`a@${'x'.repeat(64)}.com`, 'invalid_domain'],
    [`${'a'.repeat(65)}@x.com`, 'local_part_too_long'],
    [`${'a'.repeat(60)}@${['b', 'c', 'd', 'e'].map((letter) => letter.repeat(60)).join('.')}.com`, 'too_long'],
    [`${'a'.repeat(290)}@x.com`, 'too_long'],
    ['a'.repeat(5000), 'too_long'],
    ['=?utf-8?q?victim=40example.com?=@relay.example', 'encoded_word'],
    ['=?ISO-8859-1?B?dmljdGlt?=@x.com', 'encoded_word'],
    ['victim%example.com@relay.example', 'source_route'],
    ['relay!victim@x.com', 'source_route'],
    ['/G=John/S=Smith/@x400.example', 'source_route'],
    ['@relay.example:victim@x.com', 'display_name_or_group']
  ]
  for (const [input, reason] of cases) {
    const result = validateEmail(input)
    // U+2028 would break the TAP stream if it reached a test name.
    t.same(result, { ok: false, reason }, JSON.stringify(input.slice(0, 40)).replace(/[\u2028\u2029]/g, '?'))
  }
})

t.test('the shortcut for plain addresses never changes an answer', async (t) => {
  // Characters that matter to RFC 5322 and to the shortcut's pattern: atext, dots, @, quotes,
  // comments, whitespace, brackets, escapes, non-ASCII letters and digits.
  const alphabet = [...'abcXYZ019!#$%&\'*+/=?^_`{|}~-', '.', '.', '@', '@', '"', '(', ')', ' ', '[', ']', '\\', ',', ':', ';', '<', '>', 'ü', '例', '\u0301', 'ß', 'Ω', '＠', '\u00a0', '\ufeff', '😀']
  const anyText = fc.array(fc.constantFrom(...alphabet), { maxLength: 40 }).map((chars) => chars.join(''))
  const atom = fc.array(fc.constantFrom(...'abcXYZ019!#$%&\'*+/=?^_`{|}~-'), { minLength: 1, maxLength: 8 }).map((chars) => chars.join(''))
  const label = fc.array(fc.constantFrom(...'abcxyz019-üßΩ😀'), { minLength: 1, maxLength: 8 }).map((chars) => chars.join(''))
  const addressShaped = fc.tuple(fc.array(atom, { minLength: 1, maxLength: 3 }), fc.array(label, { minLength: 1, maxLength: 4 }), fc.constantFrom('', '', '', ' ', '.', '(x)'))
    .map(([locals, labels, noise]) => `${locals.join('.')}${noise}@${labels.join('.')}`)
  // What survives the shape scan: atoms, non-ASCII, dots and one @, with empty sides and dots
  // anywhere (the inputs that once reached the parser and cost it up to 600 µs).
  const survivor = fc.tuple(
    fc.array(fc.constantFrom(...'aZ9!#$%&\'*+/=?^_`{|}~-', '.', '.', 'ü', '例', '😀'), { maxLength: 12 }),
    fc.array(fc.constantFrom(...'az9-_!#', '.', '.', 'ü', '例', '😀'), { maxLength: 12 })
  ).map(([local, domain]) => `${local.join('')}@${domain.join('')}`)
  for (const [name, inputs] of [['any text', anyText], ['address-shaped', addressShaped], ['shape-scan survivors', survivor]] as const) {
    let accepted = 0
    const failure = fc.check(fc.property(inputs, (input) => {
      const expected = validateEmailWithParser(input)
      if (expected.ok) accepted++
      return isDeepStrictEqual(validateEmail(input), expected)
    }), { numRuns: 10_000, seed: 20261121 })
    t.equal(failure.counterexample, null, `${name}: both paths agree on 10,000 inputs`)
    if (name === 'address-shaped') t.ok(accepted > 1000, `${name}: ${accepted} of them valid`)
  }
})

t.test('every spelling of one mailbox has one canonical form', async (t) => {
  const mailbox = (address: string): string => {
    const result = validateEmail(address)
    if (!result.ok) throw new Error(`${address} was refused: ${result.reason}`)
    return result.email.canonical
  }
  const cases: Array<[string[], string]> = [
    [['ada.lovelace@gmail.com', 'AdaLovelace@gmail.com', 'a.d.a.l.o.v.e.l.a.c.e@googlemail.com', 'ada.lovelace+bank@GMail.com'], 'adalovelace@gmail.com'],
    [['user@me.com', 'user@mac.com', 'User+x@iCloud.com'], 'user@icloud.com'],
    [['first.last@proton.me', 'first-last@protonmail.com', 'first_last+news@pm.me', 'firstlast@protonmail.ch'], 'firstlast@proton.me'],
    [['ivan-petrov@yandex.ru', 'ivan.petrov@ya.ru', 'Ivan.Petrov+x@yandex.com'], 'ivan.petrov@yandex.ru'],
    [['anything@alice.fastmail.com', 'alice+shop@fastmail.com', 'alice@fastmail.com'], 'alice@fastmail.com'],
    [['Bob+promo@Example.com', 'bob@example.com'], 'bob@example.com']
  ]
  for (const [spellings, expected] of cases) {
    for (const spelling of spellings) t.equal(mailbox(spelling), expected, spelling)
  }
  // What providers keep apart stays apart.
  t.not(mailbox('first.last@example.com'), mailbox('firstlast@example.com'), 'dots matter at an unknown provider')
  t.not(mailbox('first.last@outlook.com'), mailbox('firstlast@outlook.com'), 'and at Outlook.com')
  t.not(mailbox('user@outlook.com'), mailbox('user@hotmail.com'), 'Microsoft\'s domains are separate names')
  t.not(mailbox('base-shop@yahoo.com'), mailbox('base@yahoo.com'), 'a Yahoo disposable address has a base name of its own, not the account\'s')
  t.not(mailbox('alice@fastmail.com'), mailbox('alice@fastmail.fm'), 'Fastmail\'s domains are separate names')

  // A 10-letter Gmail local part: every dot placement and both domains are one mailbox.
  const letters = 'abcdefghij'
  const spellings = new Set<string>()
  for (let mask = 0; mask < 512; mask++) {
    let local = letters[0] ?? ''
    for (let i = 1; i < letters.length; i++) local += ((mask >> (i - 1)) & 1) === 1 ? `.${letters[i] ?? ''}` : letters[i]
    for (const domain of ['gmail.com', 'googlemail.com']) spellings.add(mailbox(`${local}@${domain}`))
  }
  t.same([...spellings], ['abcdefghij@gmail.com'], '1,024 spellings, one mailbox')
})
