/*
 * What bounds a template's render, attack by attack: LiquidJS's own limits alone (as the
 * service had them: `renderLimit` 1000 ms, `memoryLimit` 500,000) against the service's
 * bounded engines (lib/mail/templating/liquid-bounds.ts). `npm run bench:liquid-limits` (a minute).
 *
 * Each attack sits on a branch the load's test renders do not take (`minutes == 7`), so it
 * passes the load checks that can pass it, and runs when a preview asks for 7 minutes: the
 * columns "bounded" are such renders as the preview route runs them: the first one (code not
 * yet optimised, data not yet loaded) and the worst of the REPEATS after it.
 * "refused at load" means the bounded engine never accepts the template at all.
 */
import { Liquid } from 'liquidjs'
import { CompiledPart, TemplateRuleError, type Part } from '../lib/mail/templating/liquid.js'

const REPEATS = 20
const VALUES = { brand: 'Bench & Co', minutes: 7, requestedAt: '2026-01-31T09:05Z' }
const CONSTANTS = Object.freeze({ long: 'é'.repeat(500) })

/** A string of about `2^doublings × 10` characters, built in the template by capture. */
const doubled = (doublings: number, seed = 'xxxxxxxxxx'): string => `{% capture s %}${seed}{% endcapture %}{% for i in (1..${doublings}) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}`
/** The same by `append`, which LiquidJS charges to its memoryLimit. */
const appended = (doublings: number): string => `{% assign s = "xxxxxxxxxx" %}{% for i in (1..${doublings}) %}{% assign s = s | append: s %}{% endfor %}`
const loop = (times: number, body: string): string => `{% for i in (1..${times}) %}${body}{% endfor %}`
const many = (count: number, item: string, separator: string): string => Array.from({ length: count }, () => item).join(separator)

const ATTACKS: Array<[string, Part, string]> = [
  ['nested ranges 700 × 700', 'text', loop(700, loop(700, 'x'))],
  ['nested ranges 79 × 79 × 79, no output', 'text', loop(79, loop(79, loop(79, '')))],
  ['a loop over (1..400000)', 'text', loop(400_000, '{{ i }}')],
  ['append doubling × 14, then replace each x by it', 'text', `${appended(14)}{% assign t = s | replace: "x", s %}{{ t | size }}`],
  ['append doubling × 14, then split, sort, join', 'text', `${appended(14)}{% assign t = s | split: "" | sort | join: "," %}{{ t | size }}`],
  ['prepend doubling × 14, then json', 'text', `{% assign s = "xxxxxxxxxx" %}${loop(14, '{% assign s = s | prepend: s %}')}{{ s | json | size }}`],
  ['capture doubling × 14 (164K)', 'text', `${doubled(14)}{{ s | size }}`],
  ['capture doubling × 26, output once', 'text', `${doubled(26)}{{ s }}`],
  ['10K "é" by capture, url_encode × 300', 'text', `${doubled(10, 'éééééééééé')}${loop(300, '{% assign t = s | url_encode %}')}{{ t | size }}`],
  ['5K "!" by capture, cgi_escape × 300', 'text', `${doubled(9, '!!!!!!!!!!')}${loop(300, '{% assign t = s | cgi_escape %}')}{{ t | size }}`],
  ['10K "!" by capture, slugify × 300', 'text', `${doubled(10, '!!!!!!!!!!')}${loop(300, '{% assign t = s | slugify %}')}{{ t | size }}`],
  ['10K "<" by capture, escape × 300', 'text', `${doubled(10, '<<<<<<<<<<')}${loop(300, '{% assign t = s | escape %}')}{{ t | size }}`],
  ['10K by capture, upcase, truncate, slice × 300', 'text', `${doubled(10)}${loop(300, '{% assign t = s | upcase | truncate: 100000 | slice: 0, 100000 %}')}{{ t | size }}`],
  ['10K "é" by capture, json × 300', 'text', `${doubled(10, 'éééééééééé')}${loop(300, '{% assign t = s | json %}')}{{ t | size }}`],
  ['10K by capture, contains × 3000', 'text', `${doubled(10)}${loop(3000, '{% if s contains "xxxxxxxxxxy" %}{% endif %}')}`],
  ['10K "<" by capture, output as HTML × 20', 'html', `${doubled(10, '<<<<<<<<<<')}${loop(20, '{{ s }}')}`],
  ['a capture of 400,000 loop iterations', 'text', `{% capture s %}${loop(400_000, 'xxxxxxxxxx')}{% endcapture %}{{ s | size }}`],
  ['cycle × 400,000', 'text', loop(400_000, '{% cycle "a", "b", "c" %}')],
  ['tablerow over (1..400000)', 'text', '{% tablerow i in (1..400000) %}{% endtablerow %}'],
  ['increment × 400,000', 'text', loop(400_000, '{% increment n %}')],
  ['date with a 400,000-wide year', 'text', '{{ requestedAt | date: "%400000Y" }}'],
  ['date with 16 month and day names × 3000', 'text', loop(3000, '{% assign d = requestedAt | date: "%A %B %A %B %A %B %A %B %A %B %A %B %A %B %A %B" %}')],
  ['date with 2000 day names in one format', 'text', `{% assign d = requestedAt | date: "${'%A'.repeat(2000)}" %}`],
  ['join of (1..400000)', 'text', '{{ (1..400000) | join: "," | size }}'],
  ['where_exp over (1..200000)', 'text', '{% assign a = (1..200000) %}{{ a | where_exp: "x", "x > 5" | size }}'],
  ['sum over (1..400000) × 50', 'text', `{% assign a = (1..400000) %}${loop(50, '{% assign z = a | sum %}')}`],
  ['has_exp over (1..400000) × 50', 'text', `{% assign a = (1..400000) %}${loop(50, '{% assign z = a | has_exp: "x", "x == 0" %}')}`],
  ['(1..100000) contains × 50', 'text', loop(50, '{% if (1..100000) contains 0 %}{% endif %}')],
  ['where_exp over 1000 elements, each comparing 10K strings', 'text', `${doubled(10)}{% assign a = (1..1000) %}{{ a | where_exp: "x", "s contains 'y'" | size }}`],
  ['one if with 2000 contains on 10K strings', 'text', `${doubled(10)}{% if ${many(2000, 's contains "y"', ' or ')} %}{% endif %}`],
  ['case with 20,000 when values', 'text', `${doubled(10)}{% case s %}{% when ${many(20_000, 'z', ', ')} %}{% endcase %}{% assign z = "" %}`],
  ['case on a 50,000-element range, 64 values', 'text', `{% assign r = (1..50000) %}{% case r %}{% when ${many(64, 'r', ', ')} %}{% endcase %}`],
  ['url_encode of a 500-character constant × 4000', 'text', loop(4000, '{% assign t = constants.long | url_encode %}')]
].map(([name, part, attack]) => [name as string, part as Part, `{% if minutes == 7 %}${attack as string}{% endif %}${part === 'subject' ? '' : '{{ code }}'}`])

/** LiquidJS as the service configured it before the bounds: its own limits only. */
const plain = { text: new Liquid({ strictFilters: true, ownPropertyOnly: true, renderLimit: 1000, memoryLimit: 500_000, parseLimit: 262_144 }), html: new Liquid({ strictFilters: true, ownPropertyOnly: true, outputEscape: 'escape', renderLimit: 1000, memoryLimit: 500_000, parseLimit: 262_144 }) }

function timed (render: () => unknown): { ms: number, outcome: string } {
  const started = performance.now()
  let outcome: string
  try {
    const output = render()
    outcome = `rendered, ${String(output).length.toLocaleString('en')} characters`
  } catch (error) {
    outcome = (error instanceof TemplateRuleError ? error.rule : (error as Error).message).replace(/^the template does not render: /, '').slice(0, 90)
  }
  return { ms: performance.now() - started, outcome }
}

// The bounded engine first, then LiquidJS alone: the plain renders leave megabytes of garbage
// whose collection would land in the bounded renders' timings.
const bounded = ATTACKS.map(([, part, source]) => {
  let compiled: CompiledPart
  try {
    compiled = CompiledPart.compile(source, part, 'en', CONSTANTS, [{ ...VALUES, minutes: 1 }, { ...VALUES, minutes: 10 }])
  } catch (error) {
    return { refused: `refused at load: ${(error as TemplateRuleError).rule.slice(0, 80)}` }
  }
  const first = timed(() => compiled.renderFresh(VALUES, '123456')).ms
  const runs = Array.from({ length: REPEATS }, () => timed(() => compiled.renderFresh(VALUES, '123456'))).sort((a, b) => a.ms - b.ms)
  const worst = runs.at(-1) ?? { ms: 0, outcome: '' }
  return { first, median: runs[Math.floor(runs.length / 2)]?.ms ?? 0, worst: worst.ms, outcome: worst.outcome }
})
const rows = ATTACKS.map(([name, part, source], index) => {
  const engine = part === 'html' ? plain.html : plain.text
  const before = timed(() => engine.renderSync(engine.parse(source), { ...VALUES, code: '123456', locale: 'en', constants: CONSTANTS }))
  const after = bounded[index]
  const columns = after === undefined || 'refused' in after ? `— | — | — | ${after?.refused ?? ''}` : `${after.first.toFixed(1)} | ${after.median.toFixed(1)} | ${after.worst.toFixed(1)} | ${after.outcome}`
  return `| ${name} | ${before.ms.toFixed(1)} | ${before.outcome} | ${columns} |`
})
const rendered = bounded.filter((result) => !('refused' in result)) as Array<{ first: number, median: number, worst: number }>
const worstMedian = Math.max(...rendered.map((result) => result.median))
const worstBounded = Math.max(...rendered.map((result) => result.worst))
const worstFirst = Math.max(...rendered.map((result) => result.first))
process.stdout.write(`node ${process.version}; bounded: the first render of the attack's branch, then the median and the worst of the next ${REPEATS} (wall clock: a busy machine shows in the worst)\n\n`)
process.stdout.write('| attack | LiquidJS limits only (ms) | outcome | bounded, first (ms) | median (ms) | worst (ms) | outcome |\n|---|---|---|---|---|---|---|\n')
process.stdout.write(rows.join('\n') + '\n\n')
process.stdout.write(`bounded renders: longest median ${worstMedian.toFixed(1)} ms, longest ${worstBounded.toFixed(1)} ms (first renders: ${worstFirst.toFixed(1)} ms)\n`)
