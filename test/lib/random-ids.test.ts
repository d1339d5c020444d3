/*
 * Ids come from a pool of CSPRNG bytes, each byte used once: across several refills of the pool
 * every id is new (a byte served twice would repeat an id) and has its 128 bits.
 */
import t from 'tap'
import { ID_BYTES, randomId } from '../../lib/random-ids.js'

t.test('ids across several refills of the pool are all distinct, 128 bits each', async (t) => {
  const ids = Array.from({ length: 2_000 }, randomId)
  t.equal(new Set(ids).size, ids.length, 'no id repeats')
  t.ok(ids.every((id) => /^[\w-]{22}$/.test(id) && Buffer.from(id, 'base64url').length === ID_BYTES), 'each is 16 bytes, base64url')
})
