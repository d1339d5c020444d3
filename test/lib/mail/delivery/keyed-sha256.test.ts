import t from 'tap'
import { createHash, createHmac, randomBytes } from 'node:crypto'
import { KeyedSha256 } from '../../../../lib/mail/delivery/keyed-sha256.js'

const digest = async (secret: string | Uint8Array | undefined, ...parts: Array<string | Uint8Array>): Promise<string> => {
  const hash = new KeyedSha256(secret)
  for (const part of parts) hash.update(part)
  return Buffer.from(await hash.digest()).toString('hex')
}

t.test('the same digests as node:crypto, keyed or not, whatever the input type', async (t) => {
  t.equal(await digest(undefined, 'abc', new Uint8Array([1, 2, 3])), createHash('sha256').update('abc').update(Buffer.from([1, 2, 3])).digest('hex'))
  // SigV4's chain: a string secret ("AWS4" + secret key), then each HMAC's output as the next key.
  let key: string | Uint8Array = 'AWS4wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'
  let expected: Buffer | string = key
  for (const part of ['20260101', 'eu-west-1', 'ses', 'aws4_request']) {
    const hash: KeyedSha256 = new KeyedSha256(key)
    hash.update(part)
    const ours: Uint8Array = await hash.digest()
    expected = createHmac('sha256', expected).update(part).digest()
    t.equal(Buffer.from(ours).toString('hex'), expected.toString('hex'), `HMAC with the key of step ${part}`)
    key = ours
  }
})

t.test('keys are told apart by content, past the cache bound too', async (t) => {
  const keys = Array.from({ length: 40 }, () => randomBytes(32))
  for (const round of [1, 2]) {
    for (const [index, secret] of keys.entries()) {
      // A view into a larger buffer: only its own bytes are the key.
      const padded = Buffer.concat([randomBytes(7), secret, randomBytes(5)])
      const view = new Uint8Array(padded.buffer, padded.byteOffset + 7, 32)
      const expected = createHmac('sha256', secret).update('message').digest('hex')
      t.equal(await digest(view, 'message'), expected, `round ${round}, key ${index}`)
    }
  }
  const hash = new KeyedSha256(keys[0])
  hash.update('first')
  hash.reset()
  hash.update('second')
  t.equal(Buffer.from(await hash.digest()).toString('hex'), createHmac('sha256', keys[0] as Buffer).update('second').digest('hex'), 'reset starts over with the same key')
})
