/*
 * The work of a template's render is bounded whatever the template says: each attack of the
 * issue (large ranges, strings doubled and fed to filters, captures, cycle, tablerow,
 * increment, wide dates, long comparisons) is refused at load with its rule, and on a branch
 * the load did not take, a dispatch or a preview stops it within the render budget and sends
 * or shows the built-in wording. The time bounds asserted here are stall guards on the CPU time
 * the process spent, not on the wall clock: what the work cost, however long a busy machine kept
 * the process waiting for a core. They are not measurements (bench/liquid-limits.ts measures).
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { previewVerificationParts, renderVerificationParts } from '../../../../lib/mail/templating/message.js'
import { CompiledPart, TemplateRuleError, type Part, type PartValues } from '../../../../lib/mail/templating/liquid.js'
import { ARRAY_LIMIT, DATE_FORMAT_LIMIT, LOAD_WORK_LIMIT, MARKUP_LIMIT, MEMORY_LIMIT, TAG_ARGUMENT_LIMIT, VALUE_LIMIT, markupCount, positionIn } from '../../../../lib/mail/templating/liquid-bounds.js'
import { TenantTemplates } from '../../../../lib/mail/templating/tenant-templates.js'
import { killOnExit } from '../../../support/processes.js'

const STALL_GUARD_MS = 1000
/** CPU time this process has spent, in ms (a preview's thread included). */
function cpuMs (): number {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}
const SAMPLES: PartValues[] = [1, 10].map((minutes) => ({ brand: 'Acme', minutes, requestedAt: '2026-01-31T09:05Z' }))
const n = (value: number): string => value.toLocaleString('en')

/** A string of 10 × 2^doublings characters, built by capture (which LiquidJS does not charge). */
const doubled = (doublings: number, seed = 'xxxxxxxxxx'): string => `{% capture s %}${seed}{% endcapture %}{% for i in (1..${doublings}) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}`
/** The same by append, or prepend. */
const grown = (filter: 'append' | 'prepend', doublings: number): string => `{% assign s = "xxxxxxxxxx" %}{% for i in (1..${doublings}) %}{% assign s = s | ${filter}: s %}{% endfor %}`
const loop = (times: number, body: string): string => `{% for i in (1..${times}) %}${body}{% endfor %}`
const many = (count: number, item: string): string => Array.from({ length: count }, () => item).join(', ')

function compile (source: string, part: Part = 'text'): CompiledPart {
  return CompiledPart.compile(source, part, 'en', { long: 'é'.repeat(500) }, SAMPLES)
}

/** The rule a template breaks at load, and the CPU time the load took. */
function refusal (source: string, part: Part = 'text'): { rule: string, ms: number } {
  const started = cpuMs()
  try {
    compile(source, part)
  } catch (error) {
    if (error instanceof TemplateRuleError) return { rule: error.rule, ms: cpuMs() - started }
    throw error
  }
  return { rule: 'accepted', ms: cpuMs() - started }
}

const OVER_WORK = new RegExp(`counts more than ${n(LOAD_WORK_LIMIT)} units of work`)
/** A bound, or the work limit when the attack spends its units before it meets the bound. */
const orWork = (rule: RegExp): RegExp => new RegExp(`${rule.source}|${OVER_WORK.source}`)
const OVER_MEMORY = new RegExp(`allocates more than the limit of ${n(MEMORY_LIMIT)} units`)

const ATTACKS: Array<[string, string, RegExp, Part?]> = [
  ['nested ranges', loop(700, loop(700, 'x')), OVER_WORK],
  ['nested ranges, no output', loop(79, loop(79, loop(79, ''))), OVER_WORK],
  ['a range of a million', loop(1_000_000, '{{ i }}'), OVER_MEMORY],
  ['a string doubled by append', grown('append', 30), orWork(new RegExp(`the append filter's result is longer than ${n(VALUE_LIMIT)} characters`))],
  ['a string doubled by prepend', grown('prepend', 30), orWork(new RegExp(`the prepend filter's result is longer than ${n(VALUE_LIMIT)} characters`))],
  ['a string doubled by capture', doubled(30), new RegExp(`the capture s is longer than ${n(VALUE_LIMIT)} characters`)],
  ['a capture of a long loop', `{% capture s %}${loop(400_000, 'xxxxxxxxxx')}{% endcapture %}`, OVER_MEMORY],
  ['a doubled string, replace', `${doubled(10)}{% assign t = s | replace: "x", s %}`, /the replace filter's result is longer|allocates more/],
  ['a doubled string, split', `${doubled(10)}{% assign t = s | split: "" %}`, new RegExp(`the split filter's result is an array of ${n(10_240)} elements; the limit is ${n(ARRAY_LIMIT)}`)],
  ['a doubled string, split, sort, join', `${doubled(9, 'xyxyxyxyxy')}{% assign t = s | split: "y" | sort | join: s %}`, new RegExp(`the split filter's result is an array of ${n(2560)} elements`)],
  ['a doubled string, upcase in a loop', `${doubled(10)}${loop(100_000, '{% assign t = s | upcase %}')}`, OVER_MEMORY],
  ['a doubled string, truncate and slice in a loop', `${doubled(10)}${loop(100_000, '{% assign t = s | truncate: 100000 | slice: 0, 10000 %}')}`, OVER_MEMORY],
  ['a doubled string, url_encode', `${doubled(10, 'éééééééééé')}{% assign t = s | url_encode %}`, /the url_encode filter's result is longer/],
  ['a doubled string, url_encode in a loop', `${doubled(8, 'éééééééééé')}${loop(200, loop(200, '{% assign t = s | url_encode %}'))}`, OVER_WORK],
  ['a doubled string, escape in a loop', `${doubled(9, '<<<<<<<<<<')}${loop(100_000, '{% assign t = s | escape %}')}`, /the escape filter's result is longer|allocates more/],
  ['a doubled string, json in a loop', `${doubled(10)}${loop(100_000, '{% assign t = s | json %}')}`, OVER_MEMORY],
  ['a doubled string, compared in a loop', `${doubled(10)}${loop(200, loop(200, '{% if s contains "xy" %}{% endif %}'))}`, OVER_WORK],
  ['one condition with 2000 comparisons', `${doubled(10)}{% if ${Array.from({ length: 2000 }, () => 's contains "xxxxxxxxy"').join(' or ')} %}{% endif %}`, OVER_WORK],
  ['cycle', loop(1_000_000, '{% cycle "a", "b", "c" %}'), OVER_MEMORY],
  ['cycle in nested loops', loop(200, loop(200, '{% cycle "a", "b", "c" %}')), OVER_WORK],
  ['tablerow', '{% tablerow i in (1..1000000) %}{{ i }}{% endtablerow %}', OVER_MEMORY],
  ['increment', loop(200, loop(200, '{% increment n %}')), OVER_WORK],
  ['a date with a wide year', '{{ requestedAt | date: "%1000000Y" }}', OVER_MEMORY],
  ['a date with a long format', `{{ requestedAt | date: "${'%A'.repeat(1000)}" }}`, new RegExp(`the date filter's format is longer than ${DATE_FORMAT_LIMIT} characters`)],
  ['dates in a loop', loop(200, loop(200, '{% assign d = requestedAt | date: "%A %B %A %B %A %B %A %B" %}')), OVER_WORK],
  ['a large range in a filter', '{{ (1..40000) | join: "," }}', orWork(new RegExp(`the join filter's input is an array of ${n(40_000)} elements`))],
  ['a large range in a comparison', '{% if (1..40000) contains 0 %}{% endif %}', orWork(new RegExp(`an operand of contains is an array of ${n(40_000)} elements`))],
  ['where_exp over a large range', '{% assign a = (1..40000) %}{{ a | where_exp: "x", "x > 5" | size }}', orWork(/the where_exp filter's input is an array/)],
  ['case with many values', `{% case brand %}{% when ${many(TAG_ARGUMENT_LIMIT, '"x"')} %}{% endcase %}`, new RegExp(`takes ${TAG_ARGUMENT_LIMIT + 1} values; a tag takes at most ${TAG_ARGUMENT_LIMIT}`)],
  ['cycle with many candidates', `{% cycle ${many(TAG_ARGUMENT_LIMIT + 1, '"x"')} %}`, /takes 65 values; a tag takes at most 64/],
  ['a case on a large range', '{% assign r = (1..40000) %}{% case r %}{% when r %}{% endcase %}', orWork(/an operand of == is an array of 40,000 elements/)]
]

t.test('each attack is refused at load, with its rule, without stalling the load', async (t) => {
  for (const [what, attack, rule, part] of ATTACKS) {
    const refused = refusal(`{{ code }}${attack}`, part)
    t.match(refused.rule, rule, what)
    t.ok(refused.ms < STALL_GUARD_MS, `${what}: refused in ${refused.ms.toFixed(1)} ms of CPU`)
  }
})

t.test('on a branch the load did not take, a dispatch and a preview stop within the budget and show the built-in wording', async (t) => {
  // The preview thread starts with the first preview (loading its modules): started here, so
  // the times below are the renders'.
  await previewVerificationParts({ templates: TenantTemplates.load({ templates: { en: { text: '{{ code }}' } } }, { folder: null, brand: 'Acme' }), locale: 'en', brand: 'Acme', code: '482910', ttlSeconds: 600 })
  for (const [what, attack] of ATTACKS.filter(([, , rule]) => rule === OVER_WORK)) {
    // Twenty times the attack: on a fast, idle machine one of them may finish within the
    // dispatch's 50 ms, and the test is about what stops a render that does not.
    const templates = TenantTemplates.load({ templates: { en: { subject: 'Sign in to {{ brand }}', text: `{% if minutes == 7 %}${loop(20, attack)}{% endif %}{{ code }}` } } }, { folder: null, brand: 'Acme' })
    const input = { templates, locale: 'en', brand: 'Acme', code: '482910', ttlSeconds: 7 * 60 }
    const fallbacks: string[] = []
    let started = cpuMs()
    const sent = renderVerificationParts({ ...input, onTemplateFallback: (fallback) => { fallbacks.push(fallback.rule) } })
    t.ok(cpuMs() - started < STALL_GUARD_MS, `${what}: a dispatch stops (${(cpuMs() - started).toFixed(1)} ms of CPU)`)
    t.equal(sent.subject, 'Your Acme verification code', `${what}: the dispatch sends the built-in wording`)
    started = cpuMs()
    const shown = await previewVerificationParts({ ...input, onTemplateFallback: (fallback) => { fallbacks.push(fallback.rule) } })
    t.ok(cpuMs() - started < STALL_GUARD_MS, `${what}: a preview stops (${(cpuMs() - started).toFixed(1)} ms of CPU)`)
    t.equal(shown.subject, 'Your Acme verification code', `${what}: the preview shows the built-in wording`)
    // Which bound stops a render first (time, allocation or output) depends on the machine's
    // speed: any of them stops it, and each says so.
    const stopped = /counts more than [\d,]+ units of work|takes longer than its time budget|allocates more than the limit|output is larger than/
    t.match(fallbacks, [stopped, stopped], `${what}: both say why`)
  }
})

t.test('within the bounds, templates work as LiquidJS documents them', async (t) => {
  const values = (minutes: number): PartValues => ({ brand: 'Acme', minutes, requestedAt: '2026-01-31T09:05Z' })
  const part = compile('{{ code }}: {% case minutes %}{% when 1, 2 %}few{% when 10 %}ten{% else %}many{% endcase %}' +
    '{% capture who %}{{ brand | upcase }}!{% endcapture %} {{ who }} {{ (1..1000) | join: "" | size }} {{ (1..3) | join: "-" }}' +
    `{% if (1..${ARRAY_LIMIT}) contains 5 %} in{% endif %} {% cycle "a", "b" %}{% cycle "a", "b" %} {{ requestedAt | date: "%A %-d %B" }}`)
  t.equal(part.render(values(1), '482910'), '482910: few ACME! 2893 1-2-3 in ab Saturday 31 January')
  t.equal(part.render(values(10), '482910'), '482910: ten ACME! 2893 1-2-3 in ab Saturday 31 January')
  t.equal(part.renderFresh(values(7), '482910'), '482910: many ACME! 2893 1-2-3 in ab Saturday 31 January')
  t.equal(compile(`{{ code }}{% case brand %}{% when ${many(TAG_ARGUMENT_LIMIT - 1, '"x"')} %}x{% endcase %}`).render(values(1), '1'), '1', `a tag with ${TAG_ARGUMENT_LIMIT} values`)
  t.equal(compile(`{{ code }}${doubled(10)}{{ s | size }}`).render(values(1), '1'), '110240', `a value of ${n(10_240)} characters`)
})

/** Templates around the load's work limit: the decision on each must never depend on the clock. */
const NEAR_THE_LIMIT: string[] = [
  loop(20, loop(20, '{{ brand }}')),
  loop(60, loop(80, 'x')),
  loop(70, loop(80, 'x')),
  loop(6, '{{ requestedAt | date: "%A %-d %B %Y" }}'),
  loop(7, '{{ requestedAt | date: "%A %-d %B %Y" }}'),
  `${doubled(10)}${loop(14, '{% assign t = s | url_encode %}')}`,
  `${doubled(10)}${loop(16, '{% assign t = s | url_encode %}')}`,
  loop(700, loop(700, 'x'))
]
const decisions = (): string[] => NEAR_THE_LIMIT.map((source) => refusal(`{{ code }}${source}`).rule)

t.test('whether a part is accepted at load depends on the work its renders count, never on the clock', async (t) => {
  const idle = decisions()
  t.ok(idle.includes('accepted') && idle.some((rule) => OVER_WORK.test(rule)), 'some are accepted, some refused for their work')
  t.match(refusal(`{{ code }}${loop(700, loop(700, 'x'))}`).rule, new RegExp(`^the template does not render: the render exceeds a bound: the render counts more than ${n(LOAD_WORK_LIMIT)} units of work, line:1, col:\\d+ \\(test render with minutes = 1\\)$`))

  // A clock on which every read is a second later than the one before: a machine so busy that
  // the process waits a second between any two steps of a render.
  const now = performance.now.bind(performance)
  let slow = now()
  performance.now = () => (slow += 1000)
  let slowDecisions: string[]
  try {
    slowDecisions = decisions()
  } finally {
    performance.now = now
  }
  t.same(slowDecisions, idle, 'the same decisions when the clock runs a second per read')
})

t.test('the same decisions with both cores saturated by other processes', async (t) => {
  const idle = decisions()
  const spinners = Array.from({ length: 2 }, () => killOnExit(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' })))
  t.teardown(() => { for (const spinner of spinners) spinner.kill('SIGKILL') })
  await Promise.all(spinners.map(async (spinner) => await once(spinner, 'spawn')))
  t.same(decisions(), idle)
})

t.test('with both cores saturated by other processes, a preview still shows the tenant\'s own wording', async (t) => {
  // About two milliseconds of CPU, within the budget. Beside two spinners the preview thread,
  // of lower priority, runs about a millisecond at a time between waits several times as long:
  // cut off by the wall clock at the budget, such a render never finished however often it
  // was tried.
  const text = `{{ code }}${loop(2000, 'x')}`
  const templates = TenantTemplates.load({ templates: { en: { subject: 'Sign in to {{ brand }}', text } } }, { folder: null, brand: 'Acme' })
  const input = { templates, locale: 'en', brand: 'Acme', code: '482910', ttlSeconds: 600 }
  await previewVerificationParts(input)
  const spinners = Array.from({ length: 2 }, () => killOnExit(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' })))
  t.teardown(() => { for (const spinner of spinners) spinner.kill('SIGKILL') })
  await Promise.all(spinners.map(async (spinner) => await once(spinner, 'spawn')))
  const fallbacks: string[] = []
  for (let preview = 0; preview < 5; preview++) {
    const shown = await previewVerificationParts({ ...input, onTemplateFallback: (fallback) => { fallbacks.push(fallback.rule) } })
    t.equal(shown.subject, 'Sign in to Acme', `preview ${preview + 1}: the tenant's subject`)
  }
  t.same(fallbacks, [], 'no render was cut off')
})

t.test('a preview renders afresh in the preview thread, so the event loop keeps turning, and leaves dispatches\' pieces alone', async (t) => {
  // `sample` picks one of a hundred values at random: five parts rendered anew almost surely differ.
  const choices = `"${Array.from({ length: 100 }, (_, index) => `v${index}`).join(',')}" | split: ","`
  const source = `{{ code }} {{ ${choices} | sample }}`
  const templates = TenantTemplates.load({ templates: { en: { subject: `Hi {{ ${choices} | sample }}`, text: source, html: source } } }, { folder: null, brand: 'Acme' })
  const input = { templates, locale: 'en', brand: 'Acme', code: '482910', ttlSeconds: 600, requestedAt: new Date('2026-03-01T10:00:00Z') }
  const dispatched = renderVerificationParts(input)
  const previews = await Promise.all(Array.from({ length: 5 }, async () => await previewVerificationParts(input)))
  t.ok(previews.some((preview) => preview.text !== dispatched.text), 'previews are rendered anew')
  t.same(renderVerificationParts(input), dispatched, 'dispatches of the same minute still get the pieces rendered for them')

  // Parts that cost about their load limit each: rendered on the event loop, a preview of them
  // would let it turn once between parts.
  const costly = `{{ code }}{% if minutes == 7 %}${loop(200, loop(200, 'x'))}{% endif %}`
  const slow = TenantTemplates.load({ templates: { en: { subject: 'Hi', text: costly, html: costly } } }, { folder: null, brand: 'Acme' })
  let turns = 0
  let done = false
  const tick = (): void => {
    turns++
    if (!done) setImmediate(tick)
  }
  setImmediate(tick)
  await previewVerificationParts({ ...input, templates: slow, ttlSeconds: 7 * 60 })
  done = true
  t.ok(turns > 10, `the event loop kept turning while the parts rendered (${turns} turns)`)
})

t.test('loading a part is bounded: markup is counted before parsing, positions come from a line index', async (t) => {
  const crowded = '{{ code }}' + '\n{{ brand }}'.repeat(MARKUP_LIMIT)
  const started = cpuMs()
  t.throws(() => compile(crowded), new TemplateRuleError(`the template has more than ${MARKUP_LIMIT} Liquid outputs and tags ({{ … }}, {% … %})`))
  t.ok(cpuMs() - started < STALL_GUARD_MS, 'refused before it is parsed')
  t.equal(markupCount('{ {{ a }} {% b %} {x} {'), 2, 'only {{ and {% open markup')

  // The same answers as LiquidJS's own count from the start of the source.
  const source = 'ab\ncd\n\nefg\n'
  const counted = (offset: number): [number, number] => {
    let [row, col] = [1, 1]
    for (let i = 0; i < offset; i++) {
      if (source[i] === '\n') [row, col] = [row + 1, 1]
      else col++
    }
    return [row, col]
  }
  for (let offset = 0; offset <= source.length; offset++) t.same(positionIn(source, offset), counted(offset), `offset ${offset}`)

  // A long part with many outputs analyses in linear time (it took seconds when every
  // variable's position was counted from the start of the source).
  const spread = '{{ code }}' + ('x'.repeat(250) + '{{ brand }}').repeat(MARKUP_LIMIT - 1)
  const loading = cpuMs()
  try { compile(spread, 'html') } catch (error) { if (!(error instanceof TemplateRuleError)) throw error }
  t.ok(cpuMs() - loading < STALL_GUARD_MS * 2, `loaded or refused in ${Math.round(cpuMs() - loading)} ms of CPU`)
})
