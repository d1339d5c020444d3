/*
 * The event-loop time one address costs the policy (lib/recipients/address.ts), for ordinary
 * addresses and for the worst inputs fast-check can find up to the body limit (4 KiB):
 * nested comments and quotes (what made the RFC 5322 parser backtrack), long runs of dots,
 * at-signs, escapes, internationalised text. Prints the median and the worst per family.
 *
 *   npm run bench:addresses
 */
import fc from 'fast-check'
import { cpus } from 'node:os'
import { validateEmail } from '../lib/recipients/address.js'

const BODY_LIMIT = 4096
const RUNS = Number(process.env.ADDRESS_RUNS ?? 2_000)
const REPEAT = 20

/** Microseconds one call takes, the best of a few, so a GC pause does not pass for the input's cost. */
function costMicros (input: string): number {
  let best = Number.POSITIVE_INFINITY
  for (let i = 0; i < 3; i++) {
    const start = process.hrtime.bigint()
    for (let j = 0; j < REPEAT; j++) validateEmail(input)
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1000 / REPEAT)
  }
  return best
}

const char = (alphabet: string): fc.Arbitrary<string> => fc.constantFrom(...alphabet)
const text = (alphabet: string, maxLength = BODY_LIMIT): fc.Arbitrary<string> => fc.array(char(alphabet), { maxLength }).map((chars) => chars.join(''))
const nested = fc.tuple(fc.integer({ min: 1, max: 1000 }), fc.constantFrom('(', '"', '<', '['), fc.constantFrom('a@x.com', '@', 'a', ''))
  .map(([depth, open, core]) => `${open.repeat(depth)}${core}${{ '(': ')', '"': '"', '<': '>', '[': ']' }[open] ?? ''}`.repeat(Math.max(1, Math.floor(BODY_LIMIT / (2 * depth + 10)))).slice(0, BODY_LIMIT))

const families: Array<[string, fc.Arbitrary<string>]> = [
  ['address-shaped, up to 254', fc.tuple(text('abcxyz019.+-_', 64), text('abcxyz019.-', 189)).map(([local, domain]) => `${local}@${domain}`)],
  ['RFC 5322 specials, up to 4 KiB', text('a@.()"\\<>,;:[] \t')],
  ['nested comments, quotes, brackets', nested],
  ['dots and at-signs, up to 4 KiB', text('a.@')],
  ['internationalised, up to 4 KiB', text('aü例\u0301.@-')],
  ['any text, up to 4 KiB', fc.string({ maxLength: BODY_LIMIT, unit: 'grapheme' })]
]

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? 0
}

const ordinary = { valid: costMicros('ada.lovelace@example.com'), invalid: costMicros('nope'), idn: costMicros('user@bücher.example') }
process.stdout.write([
  `validateEmail cost, ${cpus()[0]?.model ?? 'unknown'}, node ${process.version}`,
  `  ordinary: valid ${ordinary.valid.toFixed(2)} µs, invalid ${ordinary.invalid.toFixed(2)} µs, internationalised domain ${ordinary.idn.toFixed(2)} µs`,
  ''
].join('\n') + '\n')

let worst = { family: '', micros: 0, input: '' }
for (const [name, inputs] of families) {
  const costs: number[] = []
  fc.assert(fc.property(inputs, (input) => {
    const micros = costMicros(input)
    costs.push(micros)
    if (micros > worst.micros) worst = { family: name, micros, input }
  }), { numRuns: RUNS / families.length, seed: 20261123 })
  process.stdout.write(`  ${name.padEnd(36)} median ${median(costs).toFixed(2).padStart(6)} µs   worst ${Math.max(...costs).toFixed(2).padStart(7)} µs\n`)
}
process.stdout.write(`\nworst found: ${worst.micros.toFixed(2)} µs (${(worst.micros / ordinary.invalid).toFixed(1)} × an ordinary invalid address), ${worst.family}, ${worst.input.length} characters: ${JSON.stringify(worst.input.slice(0, 60))}…\n`)
