import t from 'tap'
import { isSnsEnvelope, MAX_MESSAGE_ATTRIBUTES, SNS_FIELDS } from '../../../lib/feedback/sns-envelope.js'

/** What SNS posts: strings, escapes of every kind, and MessageAttributes (name → { Type, Value }). */
const GENUINE = {
  Type: 'Notification',
  MessageId: '22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324',
  TopicArn: 'arn:aws:sns:eu-west-1:123456789012:ses-events',
  Subject: 'Amazon SES Email Event Notification',
  Message: JSON.stringify({ eventType: 'Bounce', mail: { tags: { tenant: ['acme'] }, headers: [{ name: 'Subject', value: 'Ünïcödé "quoted" \\ tab\t line\n \u0001 \u2028 😀' }] } }),
  Timestamp: '2026-11-28T10:00:00.000Z',
  SignatureVersion: '2',
  Signature: 'EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q==',
  SigningCertURL: 'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem',
  UnsubscribeURL: 'https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:eu-west-1:123456789012:ses-events:0000',
  MessageAttributes: { 'AWS.SNS.MOBILE.MPNS.Type': { Type: 'String', Value: 'token' }, binary: { Type: 'Binary', Value: 'AAEC' } }
}

/** The confirmations SNS posts: Token and SubscribeURL, no Subject, no UnsubscribeURL. */
const CONFIRMATION = {
  Type: 'SubscriptionConfirmation',
  MessageId: '165545c9-2a5c-472c-8df2-7ff2be2b3b1b',
  Token: '2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92768dd60a747ba6f3beb71854e285d6ad02428b09ceece29417f1f02d609c582afbacc99c583a916b9981dd2728f4ae6fdb82efd087cc3b7849e05798d2d2785c03b0879594eeac82c01f235d0e717736',
  TopicArn: 'arn:aws:sns:us-west-2:123456789012:MyTopic',
  Message: 'You have chosen to subscribe to the topic arn:aws:sns:us-west-2:123456789012:MyTopic.\nTo confirm the subscription, visit the SubscribeURL included in this message.',
  SubscribeURL: 'https://sns.us-west-2.amazonaws.com/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:us-west-2:123456789012:MyTopic&Token=2336412f37',
  Timestamp: '2012-04-26T20:45:04.751Z',
  SignatureVersion: '1',
  Signature: 'EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=',
  SigningCertURL: 'https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem'
}

/** `count` attributes as SNS writes them. */
const attributes = (count: number): Record<string, { Type: string, Value: string }> =>
  Object.fromEntries(Array.from({ length: count }, (_, index) => [`attribute.${index}`, { Type: 'String', Value: `value ${index}` }]))

t.test('what SNS posts is an envelope, however it is spaced or escaped; JSON.parse reads it back', async (t) => {
  for (const text of [
    JSON.stringify(GENUINE),
    JSON.stringify(GENUINE, null, 2),
    JSON.stringify(GENUINE, null, '\t').replaceAll('\n', '\r\n'),
    JSON.stringify(CONFIRMATION),
    JSON.stringify({ ...CONFIRMATION, Type: 'UnsubscribeConfirmation' }),
    JSON.stringify({ ...GENUINE, MessageAttributes: attributes(MAX_MESSAGE_ATTRIBUTES) }),
    JSON.stringify({ ...GENUINE, MessageAttributes: {} }),
    JSON.stringify({ ...GENUINE, MessageAttributes: { 'a "quoted\\ name\u0001': { Value: '\u0000', Type: 'Binary' } } }),
    JSON.stringify(Object.fromEntries(SNS_FIELDS.map((name) => [name, name === 'MessageAttributes' ? attributes(1) : `${name} \u00e9`]))),
    ` \n${JSON.stringify({ Type: 'Notification' })}\n `,
    '{}',
    '{"Message":"\\u00e9\\u00E9\\/\\b\\f\\n\\r\\t\\"\\\\"}',
    '{ "MessageAttributes" : { "a" : { "Type" : "String" , "Value" : "b" } } , "Type" : "Notification" }'
  ]) {
    t.ok(isSnsEnvelope(text), text.slice(0, 60))
    t.doesNotThrow(() => JSON.parse(text))
  }
})

t.test('anything else is refused: a field SNS does not send, twice or escaped, arrays, numbers, literals, objects but MessageAttributes, bad strings, trailing text', async (t) => {
  const notification = JSON.stringify(GENUINE).slice(0, -1)
  /** The genuine notification, and `extra` before its closing brace. */
  const plus = (extra: string): string => `${notification},${extra}}`
  for (const text of [
    '', ' ', '[', '[]', '"x"', '1', 'null', 'true',
    '['.repeat(262_000),
    // Fields SNS never sends: made up, another spelling, escaped, twice.
    '{"a":"b"}', '{"Type":"Notification","pad":[{"a":1}]}',
    plus('"k0":""'), plus('"":""'), plus('"SequenceNumber":"1"'),
    plus('"SigningCertUrl":"https://evil.example/x.pem"'), plus('"type":"Notification"'), plus('"Signature_Version":"1"'), plus('"Typ":"x"'), plus('"TypeX":"x"'),
    '{"T\\u0079pe":"Notification"}', '{"Typ\\u0065":"Notification"}', '{"Type\\n":"Notification"}',
    plus('"Type":"SubscriptionConfirmation"'), plus('"Message":"again"'), plus('"Subject":"second"'),
    '{"Type":"a","Type":"b"}', '{"MessageAttributes":{},"MessageAttributes":{}}',
    // Values: strings only, but MessageAttributes; MessageAttributes: attributes of Type and Value only.
    '{"Message":1}', '{"Message":-1.5e3}', '{"Message":true}', '{"Message":false}', '{"Message":null}', '{"Message":["x"]}', '{"Message":{}}', '{"Message":{"Type":"String","Value":"x"}}',
    '{"MessageAttributes":"x"}', '{"MessageAttributes":[]}', '{"MessageAttributes":{"a":"b"}}', '{"MessageAttributes":{"a":{}}}',
    '{"MessageAttributes":{"a":{"Type":"String"}}}', '{"MessageAttributes":{"a":{"Value":"x"}}}',
    '{"MessageAttributes":{"a":{"Type":"String","Value":"x","Extra":"y"}}}', '{"MessageAttributes":{"a":{"Type":"String","Type":"Number","Value":"1"}}}',
    '{"MessageAttributes":{"a":{"Type":"String","Value":{"b":"c"}}}}', '{"MessageAttributes":{"a":{"Type":"String","Value":1}}}', '{"MessageAttributes":{"a":{"type":"String","value":"x"}}}',
    '{"MessageAttributes":{"a":{"Type":"String","Value":"x"}},"a":{}}',
    JSON.stringify({ ...GENUINE, MessageAttributes: attributes(MAX_MESSAGE_ATTRIBUTES + 1) }),
    JSON.stringify({ ...GENUINE, MessageAttributes: attributes(10_400) }),
    // JSON out of shape.
    '{', '{"Type"', '{"Type":', '{"Type":"b"', '{"Type":"b",}', '{,"Type":"b"}', '{"Type":"b""Message":"d"}', '{"Type" "b"}', '{Type:"b"}', "{'Type':'b'}",
    '{"Type":"b"}x', '{"Type":"b"}{}', '{"Type":"b"}}', '{"MessageAttributes":{"a":{"Type":"c","Value":"d"}}', '{"MessageAttributes":{"a":{"Type":"c","Value":"d"}}}}', '{"MessageAttributes":{"a":{"Type":"c","Value":"d"},}}',
    '{"Message":"line\nbreak"}', '{"Message":"tab\tin"}', '{"Message":"\\x41"}', '{"Message":"\\u12"}', '{"Message":"\\u12G4"}', '{"Message":"\\u12g4"}', '{"Message":"\\', '{"Message":"unterminated',
    '\ufeff{"Type":"b"}'
  ]) t.notOk(isSnsEnvelope(text), JSON.stringify(text.slice(Math.max(0, text.length - 60))))
  // The red team's body: the fields of a notification and 22,500 made-up empty ones.
  const manyFields = JSON.stringify({ ...GENUINE, ...Object.fromEntries(Array.from({ length: 22_500 }, (_, index) => [`k${index}`, ''])) })
  t.notOk(isSnsEnvelope(manyFields), `${manyFields.length} characters of made-up fields are refused`)
})

t.test('whatever it accepts, JSON.parse reads (random mutations of a genuine body)', async (t) => {
  const base = JSON.stringify(GENUINE)
  const alphabet = '{}[]":,\\ u0a1-.etrn\n'
  let seed = 42
  const random = (below: number): number => { seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648; return seed % below }
  let accepted = 0
  for (let round = 0; round < 3000; round++) {
    let text = base
    for (let edits = 1 + random(3); edits > 0; edits--) {
      const at = random(text.length)
      const char = alphabet[random(alphabet.length)] ?? ''
      text = random(2) === 0 ? text.slice(0, at) + char + text.slice(at + 1) : text.slice(0, at) + char + text.slice(at)
    }
    if (!isSnsEnvelope(text)) continue
    accepted++
    try {
      JSON.parse(text)
    } catch {
      t.fail(`accepted, yet not JSON: ${text}`)
    }
  }
  t.ok(accepted > 100, `${accepted} mutated bodies were still envelopes, and each parsed`)
})

t.test('256 KiB that is not an envelope is refused at once; 256 KiB that is, in one linear pass', async (t) => {
  const deep = '['.repeat(262_000)
  const manyFields = JSON.stringify({ ...GENUINE, ...Object.fromEntries(Array.from({ length: 22_500 }, (_, index) => [`k${index}`, ''])) })
  const flat = JSON.stringify({ Type: 'Notification', Message: 'x'.repeat(261_000) })
  // Each escape a branch of the scan and a decode of JSON.parse: the dearest string of the size.
  const escaped = JSON.stringify({ Type: 'Notification', Message: '\u0001'.repeat(43_500) })
  // CPU time, the least of five rounds: a busy machine takes the CPU away between calls, and
  // that is wall time, not the work of a call.
  const time = (text: string): number => {
    let least = Infinity
    for (let round = 0; round < 5; round++) {
      const start = process.cpuUsage()
      for (let index = 0; index < 20; index++) isSnsEnvelope(text)
      const used = process.cpuUsage(start)
      least = Math.min(least, (used.user + used.system) / 1000 / 20)
    }
    return least
  }
  t.ok(isSnsEnvelope(flat))
  t.ok(isSnsEnvelope(escaped))
  // Bounds far from any machine's speed: JSON.parse of the deep body took tens of milliseconds.
  const [deepMs, manyMs, flatMs, escapedMs] = [time(deep), time(manyFields), time(flat), time(escaped)]
  t.ok(deepMs < 1, `256 KiB of [ refused in ${deepMs.toFixed(3)} ms of CPU`)
  t.ok(manyMs < 1, `256 KiB of made-up fields refused in ${manyMs.toFixed(3)} ms of CPU`)
  t.ok(flatMs < 20, `256 KiB envelope scanned in ${flatMs.toFixed(3)} ms of CPU`)
  t.ok(escapedMs < 20, `256 KiB envelope of escapes scanned in ${escapedMs.toFixed(3)} ms of CPU`)
})
