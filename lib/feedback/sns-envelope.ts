/**
 * The names SNS gives the fields of an HTTP/S message, of every type (Notification,
 * SubscriptionConfirmation, UnsubscribeConfirmation): nothing else is ever at the top.
 */
export const SNS_FIELDS = ['Type', 'MessageId', 'Token', 'TopicArn', 'Subject', 'Message', 'Timestamp', 'SignatureVersion', 'Signature', 'SigningCertURL', 'SubscribeURL', 'UnsubscribeURL', 'MessageAttributes'] as const
/**
 * Attributes a body's `MessageAttributes` may name. SES publishes its events with none; 10 is
 * what SNS hands an SQS subscription with raw delivery, and keeps the parse of the attributes
 * bounded where their number would not be.
 */
export const MAX_MESSAGE_ATTRIBUTES = 10
/** What SNS writes for each attribute: `{ "Type": …, "Value": … }`. */
const ATTRIBUTE_FIELDS = ['Type', 'Value'] as const
const MESSAGE_ATTRIBUTES = SNS_FIELDS.indexOf('MessageAttributes')

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN = 0x7b
const CLOSE = 0x7d
const COLON = 0x3a
const COMMA = 0x2c

/** What may follow a backslash in a JSON string besides `u`: `"`, `\`, `/`, `b`, `f`, `n`, `r`, `t` (compared in turn: a lookup in a set made a body of `\"` dearer). */
function isEscaped (char: number): boolean {
  return char === QUOTE || char === BACKSLASH || char === 0x2f || char === 0x62 || char === 0x66 || char === 0x6e || char === 0x72 || char === 0x74
}

function isHex (char: number): boolean {
  return (char >= 0x30 && char <= 0x39) || (char >= 0x41 && char <= 0x46) || (char >= 0x61 && char <= 0x66)
}

/**
 * Whether `text` is JSON of the shape SNS posts: an object of SNS_FIELDS only, each at most
 * once and a string, but `MessageAttributes`: an object of at most MAX_MESSAGE_ATTRIBUTES
 * attributes, each `{ "Type": string, "Value": string }`. A field name is SNS's spelling,
 * unescaped. One pass, no allocation: an anonymous body of 256 KiB that is not an envelope
 * (`[[[[…`, a long array, 22,500 made-up fields, 10,000 attributes) is refused at its first
 * character out of shape, before JSON.parse spends time or memory on it. What it accepts is
 * at most 13 fields and 10 attributes, so JSON.parse costs what reading its strings costs;
 * and what it accepts, JSON.parse reads.
 */
export function isSnsEnvelope (text: string): boolean {
  const length = text.length
  let at = 0
  const space = (): void => {
    for (let char = text.charCodeAt(at); char === 0x20 || char === 0x0a || char === 0x0d || char === 0x09; char = text.charCodeAt(++at));
  }
  const string = (): boolean => {
    if (text.charCodeAt(at) !== QUOTE) return false
    at++
    while (at < length) {
      const char = text.charCodeAt(at++)
      if (char === QUOTE) return true
      if (char < 0x20) return false
      if (char === BACKSLASH) {
        const escaped = text.charCodeAt(at++)
        if (escaped === 0x75) {
          if (!isHex(text.charCodeAt(at)) || !isHex(text.charCodeAt(at + 1)) || !isHex(text.charCodeAt(at + 2)) || !isHex(text.charCodeAt(at + 3))) return false
          at += 4
        } else if (!isEscaped(escaped)) {
          return false
        }
      }
    }
    return false
  }
  /** Which of `names` the quoted name at `at` is, read past it; -1 for any other, or one written with an escape. */
  const name = (names: readonly string[]): number => {
    if (text.charCodeAt(at) !== QUOTE) return -1
    for (let index = 0; index < names.length; index++) {
      const candidate = names[index] ?? ''
      if (text.startsWith(candidate, at + 1) && text.charCodeAt(at + 1 + candidate.length) === QUOTE) {
        at += candidate.length + 2
        return index
      }
    }
    return -1
  }
  const colon = (): boolean => {
    space()
    if (text.charCodeAt(at) !== COLON) return false
    at++
    space()
    return true
  }
  /** `{`, members each read by `member` (false: out of shape), `}`. */
  const object = (member: () => boolean): boolean => {
    if (text.charCodeAt(at) !== OPEN) return false
    at++
    space()
    if (text.charCodeAt(at) === CLOSE) {
      at++
      return true
    }
    for (;;) {
      if (!member()) return false
      space()
      const char = text.charCodeAt(at++)
      if (char === CLOSE) return true
      if (char !== COMMA) return false
      space()
    }
  }
  // Which names each object has had: a second `Type` is refused, as is a second `Value`.
  let fields = 0
  let attributes = 0
  let attributeFields = 0
  const attributeField = (): boolean => {
    const index = name(ATTRIBUTE_FIELDS)
    if (index === -1 || (attributeFields & (1 << index)) !== 0) return false
    attributeFields |= 1 << index
    return colon() && string()
  }
  const attribute = (): boolean => {
    if (++attributes > MAX_MESSAGE_ATTRIBUTES || !string() || !colon()) return false
    attributeFields = 0
    return object(attributeField) && attributeFields === 0b11
  }
  const field = (): boolean => {
    const index = name(SNS_FIELDS)
    if (index === -1 || (fields & (1 << index)) !== 0) return false
    fields |= 1 << index
    if (!colon()) return false
    return index === MESSAGE_ATTRIBUTES ? object(attribute) : string()
  }
  space()
  if (!object(field)) return false
  space()
  return at === length
}
