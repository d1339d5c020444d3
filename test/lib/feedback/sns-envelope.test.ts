import t from 'tap'
import { isSnsEnvelope, SNS_ENVELOPE_DEPTH } from '../../../lib/feedback/sns-envelope.js'

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

t.test('what SNS posts is an envelope, however it is spaced or escaped; JSON.parse reads it back', async (t) => {
  for (const text of [
    JSON.stringify(GENUINE),
    JSON.stringify(GENUINE, null, 2),
    JSON.stringify(GENUINE, null, '\t').replaceAll('\n', '\r\n'),
    ` \n${JSON.stringify({ Type: 'Notification' })}\n `,
    '{}',
    '{"a":{}}',
    '{"a":"\\u00e9\\/\\b\\f\\n\\r\\t\\"\\\\"}',
    '{"a":{"b":{"c":"d"}},"e":"f"}'
  ]) {
    t.ok(isSnsEnvelope(text), text.slice(0, 60))
    t.doesNotThrow(() => JSON.parse(text))
  }
})

t.test('anything else is refused: arrays, numbers, literals, deeper objects, bad strings, trailing text', async (t) => {
  const deeper = `${'{"a":'.repeat(SNS_ENVELOPE_DEPTH + 1)}"x"${'}'.repeat(SNS_ENVELOPE_DEPTH + 1)}`
  for (const text of [
    '', ' ', '[', '[]', '"x"', '1', 'null', 'true',
    '['.repeat(262_000),
    '{"Type":"Notification","pad":[{"a":1}]}',
    '{"a":1}', '{"a":-1.5e3}', '{"a":true}', '{"a":false}', '{"a":null}', '{"a":["x"]}',
    deeper,
    '{', '{"a"', '{"a":', '{"a":"b"', '{"a":"b",}', '{,"a":"b"}', '{"a":"b""c":"d"}', '{"a" "b"}', '{a:"b"}', "{'a':'b'}",
    '{"a":"b"}x', '{"a":"b"}{}', '{"a":"b"}}', '{"a":{"b":"c"}', '{"a":{"b":"c"}}}',
    '{"a":"line\nbreak"}', '{"a":"tab\tin"}', '{"a":"\\x41"}', '{"a":"\\u12"}', '{"a":"\\u12G4"}', '{"a":"\\', '{"a":"unterminated',
    '\ufeff{"a":"b"}'
  ]) t.notOk(isSnsEnvelope(text), JSON.stringify(text.slice(0, 40)))
  t.ok(isSnsEnvelope(`${'{"a":'.repeat(SNS_ENVELOPE_DEPTH)}"x"${'}'.repeat(SNS_ENVELOPE_DEPTH)}`), `${SNS_ENVELOPE_DEPTH} deep is an envelope (MessageAttributes)`)
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
  const flat = JSON.stringify({ Type: 'Notification', Message: 'x'.repeat(261_000) })
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
  // Bounds far from any machine's speed: JSON.parse of the deep body took tens of milliseconds.
  const [deepMs, flatMs] = [time(deep), time(flat)]
  t.ok(deepMs < 1, `256 KiB of [ refused in ${deepMs.toFixed(3)} ms of CPU`)
  t.ok(flatMs < 20, `256 KiB envelope scanned in ${flatMs.toFixed(3)} ms of CPU`)
})
