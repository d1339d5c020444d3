/*
 * CPU per dispatch of rendering the message, in process, without HTTP: the built-in wording
 * against a tenant's own Liquid templates (the bench tenant's of `--templates`); then the
 * language negotiation on hostile Accept-Language headers.
 * `npm run bench:templates`.
 *
 * A dispatch splices its code into pieces rendered once per minute (lib/mail/templating/liquid.ts); the
 * last row is the render that happens when the minute changes, for every part at once.
 */
import { composeVerificationMessage } from '../lib/mail/templating/message.js'
import { negotiateLocale } from '../lib/mail/templating/locale.js'
import { TenantTemplates } from '../lib/mail/templating/tenant-templates.js'
import { benchTenantsDocument, withTemplates } from './support/service.js'

const OPERATIONS = 100_000
const WARMUP = 10_000

function cpuMicros (operation: (index: number) => unknown, operations = OPERATIONS): number {
  for (let i = 0; i < Math.min(WARMUP, operations); i++) operation(i)
  const before = process.cpuUsage()
  for (let i = 0; i < operations; i++) operation(i)
  const used = process.cpuUsage(before)
  return (used.user + used.system) / operations
}

const entry = withTemplates(benchTenantsDocument('sk_live_unused')).tenants[0]
if (entry === undefined) throw new Error('no bench tenant')
const own = TenantTemplates.load(entry, { folder: null, brand: entry.brand?.name ?? entry.id })
const at = new Date()
const message = (templates: TenantTemplates | undefined, index: number, requestedAt = at): unknown => composeVerificationMessage({
  to: 'ada@example.com',
  from: 'codes@bench.example',
  brand: 'Bench & Co',
  code: String(100_000 + (index % 900_000)),
  ttlSeconds: 600,
  locale: 'en',
  tags: { tenant: 'bench', mode: 'live' },
  requestedAt,
  ...(templates === undefined ? {} : { templates })
})

const rows: Array<[string, number]> = [
  ['built-in wording', cpuMicros((index) => message(undefined, index))],
  ['tenant templates (subject, text, HTML)', cpuMicros((index) => message(own, index))],
  // A new minute for every message: each one renders its three parts with LiquidJS.
  ['tenant templates, rendered anew (once a minute)', cpuMicros((index) => message(own, index, new Date(at.getTime() + (index + 1) * 60_000)), OPERATIONS / 10)]
]
process.stdout.write(`node ${process.version}, ${OPERATIONS} messages each\n`)
for (const [what, micros] of rows) process.stdout.write(`${what.padEnd(50)} ${micros.toFixed(2).padStart(8)} µs\n`)

// The language of a dispatch from a hostile Accept-Language (test/lib/mail/templating/message.test.ts
// only guards against a stall): what the length and entry caps leave to parse.
const tenThousand = Array.from({ length: 10_000 }, (_, i) => `x${i % 10}-yy;q=0.${i % 10}`).join(', ')
const headers: Array<[string, string]> = [
  ['10,000 entries, the match last', `${tenThousand}, fr`],
  ['a match, then 10,000 entries', `de;q=0.5, ${tenThousand}`],
  ['one entry of 1,000,000 ";"', ';'.repeat(1_000_000) + ',fr'],
  ['"fr" and 250,000 ";q=1"', 'fr' + ';q=1'.repeat(250_000)]
]
process.stdout.write('\nnegotiateLocale on a hostile Accept-Language, CPU per call\n')
for (const [what, header] of headers) {
  process.stdout.write(`${what.padEnd(50)} ${cpuMicros(() => negotiateLocale(undefined, header), 200).toFixed(2).padStart(8)} µs\n`)
}
