import { randomBytes } from 'node:crypto'
import { Context, Liquid, Output, defaultOperators, filters as builtinFilters, toValueSync, type FS, type Template } from 'liquidjs'
import { CodePieces } from '../../code-pieces.js'
import { BoundedCaptureTag, BoundedCaseTag, DISPATCH_RENDER_BUDGET_MS, DISPATCH_WALL_LIMIT_MS, PREVIEW_WALL_LIMIT_MS, LOAD_WORK_LIMIT, MARKUP_WORK_UNITS, MEMORY_LIMIT, RENDER_BUDGET_MS, RENDER_WORK_LIMIT, RenderBoundError, WorkMeter, boundFilters, boundedFilter, boundedOperators, markupCount, MARKUP_LIMIT, tagArgumentProblem } from './liquid-bounds.js'

/** The three parts of a message a tenant may write. */
export type Part = 'subject' | 'text' | 'html'
export const PARTS: readonly Part[] = ['subject', 'text', 'html']

/** What a template may read; never the requestId, the address or anything secret. */
export const TEMPLATE_VARIABLES: readonly string[] = ['code', 'minutes', 'brand', 'locale', 'requestedAt', 'constants']

/** Largest template source per part, in characters (a file is refused past it before parsing). */
export const SOURCE_LIMITS: Readonly<Record<Part, number>> = { subject: 1024, text: 64 * 1024, html: 256 * 1024 }
/**
 * Largest rendered part. A subject is one header line (mail clients show well under 100
 * characters); Gmail clips HTML bodies past about 100 KB, so 256 KiB is far above any mail
 * meant to be read.
 */
export const OUTPUT_LIMITS: Readonly<Record<Part, number>> = { subject: 250, text: 64 * 1024, html: 256 * 1024 }

/** The rendered code can be no other string: private-use characters around random letters. */
const CODE_MARK = `\uE000${randomBytes(12).toString('base64url')}\uE001`

/**
 * C0/C1 controls (CR and LF among them, which could start a new header line), the Unicode
 * line and paragraph separators, and the bidirectional overrides that let a label display as
 * something other than what it is.
 */
const UNSAFE_IN_LINE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]+/g

/** One line of text with no control characters: what a header value may hold. */
export function singleLine (value: string): string {
  return value.replace(UNSAFE_IN_LINE, ' ').replace(/\s+/g, ' ').trim()
}

/** A template the service will not use; `rule` says why, in words for the file's author. */
export class TemplateRuleError extends Error {
  constructor (readonly rule: string) {
    super(rule)
    this.name = 'TemplateRuleError'
  }
}

/** The file system LiquidJS is given: every call is refused, whatever a template or an option asks. */
export const NO_FILES: FS = {
  exists: async () => { throw new Error('templates cannot read files') },
  existsSync: () => { throw new Error('templates cannot read files') },
  readFile: async () => { throw new Error('templates cannot read files') },
  readFileSync: () => { throw new Error('templates cannot read files') },
  resolve: () => { throw new Error('templates cannot read files') },
  contains: async () => false,
  containsSync: () => false
}

/** What a new engine renders once, before any template: dates with names, a loop, a branch, filters, an output. */
const WARM_UP = '{{ requestedAt | date: "%A %a %B %b %-d %Y %H:%M" }}{% for i in (1..2) %}{% if i == 1 %}{{ i | plus: 1 | append: "x" }}{% endif %}{% endfor %}'

/** The tags that read other templates or files; the `liquid` tag, which can wrap them, knows only the tags left. */
export const FILE_TAGS: readonly string[] = ['include', 'render', 'layout', 'block']

/**
 * One engine per language (the `date` filter names months and days in it) and per part kind:
 * the HTML part escapes every output (`outputEscape`), the text part and the subject do not
 * (they are not markup; the subject is made one line after rendering).
 *
 * What a template cannot do: read files (the file tags are removed, in every form, and the
 * engine has no root, partials or layouts folder, no relative or dynamic partials, and a file
 * system that refuses every call), call code, reach prototypes (`ownPropertyOnly`), print a
 * value unescaped in HTML (the `raw` filter is removed), use a variable or filter that does
 * not exist (strict: a typo is an error, not an empty string), or run without bounds: every
 * filter, comparison, capture and `case` is bounded (lib/mail/templating/liquid-bounds.ts), with
 * LiquidJS's own parse, time and allocation limits.
 */
const engines = new Map<string, Liquid>()

export function engineFor (locale: string, part: Part): Liquid {
  const escaped = part === 'html'
  const name = `${locale}\u0000${escaped ? 'html' : 'text'}`
  let engine = engines.get(name)
  if (engine === undefined) {
    engine = new Liquid({
      fs: NO_FILES,
      root: [],
      partials: [],
      layouts: [],
      relativeReference: false,
      dynamicPartials: false,
      strictVariables: true,
      strictFilters: true,
      ownPropertyOnly: true,
      jsTruthy: false,
      operators: boundedOperators(defaultOperators),
      ...(escaped ? { outputEscape: boundedFilter('escape', builtinFilters.escape as Parameters<typeof boundedFilter>[1]) } : {}),
      locale,
      timezoneOffset: 0,
      parseLimit: SOURCE_LIMITS.html,
      renderLimit: RENDER_BUDGET_MS,
      memoryLimit: MEMORY_LIMIT
    })
    for (const tag of FILE_TAGS) Reflect.deleteProperty(engine.tags, tag)
    Reflect.deleteProperty(engine.filters, 'raw')
    boundFilters(engine)
    engine.registerTag('capture', BoundedCaptureTag)
    engine.registerTag('case', BoundedCaseTag)
    // The first render in a process loads the language's month and day names and compiles
    // LiquidJS's hot paths (about 15 ms): paid here, once per engine, rather than by the first
    // template's test render or a dispatch's budget.
    engine.parseAndRenderSync(WARM_UP, { requestedAt: '2026-01-31T09:05Z' }, { renderLimit: Number.POSITIVE_INFINITY })
    engines.set(name, engine)
  }
  return engine
}

/** The values a part is rendered with, the code aside (spliced in afterwards). */
export interface PartValues {
  brand: string
  minutes: number
  /** ISO 8601, UTC, to the minute: `2026-05-01T12:34Z`. */
  requestedAt: string
}

/** Rewords LiquidJS's messages where ours say more to a template's author. */
function describeLiquidError (error: unknown): string {
  const message = error instanceof Error ? error.message : String(error)
  const tag = /^tag "(include|render|layout|block)" not found/.exec(message)
  if (tag !== null) return `the ${tag[1] ?? ''} tag is not available: a template cannot read other templates or files (${message})`
  if (message.startsWith('undefined filter: raw')) return `the raw filter is not available: the HTML part escapes every value (${message})`
  if (message.startsWith('template render limit exceeded')) return `the render takes longer than its time budget (${message})`
  if (error instanceof RenderBoundError) return `the render exceeds a bound: ${message}`
  if (message.startsWith('memory alloc limit exceeded')) return `the render allocates more than the limit of ${MEMORY_LIMIT.toLocaleString('en')} units: a range, a loop or a string grows too large (${message})`
  if ((error as { originalError?: unknown }).originalError instanceof RenderBoundError) return `the render exceeds a bound: ${message}`
  if (message.startsWith('Invalid string length')) return 'the output is too large'
  return message
}

/**
 * The outputs `{{ code }}` that are not inside a capture, counted through every nested tag.
 * An output whose source is the bare name has no filter of the author's (the HTML engine
 * adds its escape filter to every output, which leaves digits alone).
 */
function bareCodeOutputs (templates: readonly Template[], insideCapture: boolean): number {
  let count = 0
  for (const template of templates) {
    if (template instanceof Output) {
      if (!insideCapture && template.token.content.trim() === 'code') count++
      continue
    }
    if (typeof template.children === 'function') {
      const name = (template.token as { name?: unknown }).name
      count += bareCodeOutputs(toValueSync(template.children(false, true)), insideCapture || name === 'capture')
    }
  }
  return count
}

/**
 * One part of a tenant's message in one language, parsed and checked once, when the tenants
 * file is loaded.
 *
 * The code can only be written `{{ code }}`: no filter, tag, assignment or capture ever sees
 * it, so no branch depends on it. The part is therefore rendered with a marker in place of
 * the code, and a dispatch only splices its code in: the rendered pieces are kept until the
 * other values change (the request time, to the minute), so a dispatch costs no LiquidJS
 * render most of the time, and what a dispatch sends is exactly what was checked.
 */
/** A part as its tenants-file entry gave it: enough to compile it again in another thread. */
export interface PartRecipe {
  part: Part
  locale: string
  constants: Readonly<Record<string, string>>
  source: string
}

const threadCpuUsage = (process as { threadCpuUsage?: () => NodeJS.CpuUsage }).threadCpuUsage?.bind(process)

/**
 * CPU time of this thread in ms, where Node tells it (24 does), else of the process: a render
 * is charged its own thread's time, not a preview thread's or the garbage collector's.
 */
export function threadCpuMs (): number {
  const { user, system } = threadCpuUsage === undefined ? process.cpuUsage() : threadCpuUsage()
  return (user + system) / 1000
}

export class CompiledPart {
  readonly part: Part
  /**
   * The work its check counted at load: MARKUP_WORK_UNITS per output and tag, and the units of
   * its test renders. A tenant's parts share TENANT_TEMPLATE_WORK_LIMIT.
   */
  get loadWork (): number { return this.#loadWork }
  #loadWork = 0
  readonly #engine: Liquid
  readonly #templates: Template[]
  readonly #locale: string
  readonly #constants: Readonly<Record<string, string>>
  readonly #source: string
  /** The pieces dispatches use, rendered for the values `key` names. */
  #rendered: { key: string, pieces: CodePieces | TemplateRuleError } | null = null

  private constructor (part: Part, engine: Liquid, templates: Template[], locale: string, constants: Readonly<Record<string, string>>, source: string) {
    this.part = part
    this.#source = source
    this.#engine = engine
    this.#templates = templates
    this.#locale = locale
    this.#constants = constants
  }

  /**
   * Parses and checks a part: its variables, how it uses the code, then test renders with
   * each of `samples`. Throws TemplateRuleError naming the first rule it breaks.
   */
  static compile (source: string, part: Part, locale: string, constants: Readonly<Record<string, string>>, samples: readonly PartValues[]): CompiledPart {
    const steps = CompiledPart.compiling(source, part, locale, constants, samples)
    for (let step = steps.next(); ; step = steps.next()) if (step.done === true) return step.value
  }

  /**
   * `compile` a step at a time: the generator pauses after parsing and checking the source,
   * and after each test render, so that a caller can let other work run in between.
   */
  static * compiling (source: string, part: Part, locale: string, constants: Readonly<Record<string, string>>, samples: readonly PartValues[]): Generator<void, CompiledPart, void> {
    if (source.length > SOURCE_LIMITS[part]) throw new TemplateRuleError(`the template is longer than ${SOURCE_LIMITS[part]} characters`)
    const markups = markupCount(source)
    if (markups > MARKUP_LIMIT) throw new TemplateRuleError(`the template has more than ${MARKUP_LIMIT} Liquid outputs and tags ({{ … }}, {% … %})`)
    const engine = engineFor(locale, part)
    let templates: Template[]
    try {
      templates = engine.parse(source)
    } catch (error) {
      throw new TemplateRuleError(`the template does not parse: ${describeLiquidError(error)}`)
    }
    const crowded = tagArgumentProblem(templates)
    if (crowded !== null) throw new TemplateRuleError(crowded)
    const analysis = engine.analyzeSync(templates, { partials: false })
    for (const [name, uses] of Object.entries(analysis.globals)) {
      const at = uses[0]?.location
      const where = at === undefined ? '' : ` (line ${at.row}, column ${at.col})`
      if (!TEMPLATE_VARIABLES.includes(name)) throw new TemplateRuleError(`unknown variable "${name}"${where}; the variables are ${TEMPLATE_VARIABLES.join(', ')}`)
      if (name !== 'constants') continue
      for (const use of uses) {
        const key = use.segments[1]
        if (typeof key === 'string' && !Object.hasOwn(constants, key)) {
          throw new TemplateRuleError(`unknown constant "constants.${key}" (line ${use.location.row}, column ${use.location.col}); this tenant's constants are ${Object.keys(constants).join(', ') || 'none'}`)
        }
      }
    }
    const codeUses = analysis.globals.code?.length ?? 0
    if (part === 'subject') {
      if (codeUses > 0) throw new TemplateRuleError('the subject must not contain the code: subjects show in notifications and mailbox lists')
    } else if (codeUses === 0) {
      throw new TemplateRuleError('the template must contain the code, written {{ code }}')
    } else if (bareCodeOutputs(templates, false) !== codeUses) {
      throw new TemplateRuleError('the code may only be written {{ code }}: no filter, tag, assignment or capture may use it')
    }
    const compiled = new CompiledPart(part, engine, templates, locale, constants, source)
    compiled.#loadWork = markups * MARKUP_WORK_UNITS
    for (const sample of samples) {
      yield
      compiled.#loadWork += compiled.#testRender(sample)
    }
    return compiled
  }

  /** What a preview renders in its own thread (lib/mail/templating/preview-renderer.ts) to compile this part again there. */
  get recipe (): PartRecipe {
    return { part: this.part, locale: this.#locale, constants: this.#constants, source: this.#source }
  }

  /**
   * A test render at load: it must pass every rule within LOAD_WORK_LIMIT units of work. No
   * clock is read for the decision, so a busy machine never refuses a template an idle one
   * accepts. Returns the units it counted.
   */
  #testRender (sample: PartValues): number {
    const meter = new WorkMeter(LOAD_WORK_LIMIT)
    const pieces = this.#render(sample, meter)
    if (pieces instanceof TemplateRuleError) throw new TemplateRuleError(`${pieces.rule} (test render with minutes = ${sample.minutes})`)
    return meter.spent
  }

  /**
   * The part with `code` in it, as dispatch sends it; throws TemplateRuleError when these
   * values break a rule. The rendered pieces are kept until the values change, and so is a
   * refusal.
   */
  render (values: PartValues, code: string): string {
    return this.pieces(values).splice(code)
  }

  /**
   * The rendered pieces around the code (`render` splices it in), kept until the values
   * change: the same pieces for every dispatch of a minute. Throws TemplateRuleError.
   */
  pieces (values: PartValues): CodePieces {
    const key = `${values.minutes}\u0000${values.requestedAt}\u0000${values.brand}`
    if (this.#rendered?.key !== key) this.#rendered = { key, pieces: this.#renderWithin(values, DISPATCH_RENDER_BUDGET_MS, DISPATCH_WALL_LIMIT_MS) }
    const { pieces } = this.#rendered
    if (pieces instanceof TemplateRuleError) throw pieces
    return pieces
  }

  /**
   * The part with `code` in it, rendered afresh for a preview: it neither reads nor replaces
   * the pieces dispatches use. Throws TemplateRuleError.
   */
  renderFresh (values: PartValues, code: string): string {
    const pieces = this.#renderWithin(values, RENDER_BUDGET_MS, PREVIEW_WALL_LIMIT_MS)
    if (pieces instanceof TemplateRuleError) throw pieces
    return pieces.splice(code)
  }

  /**
   * A render within RENDER_WORK_LIMIT units of work and `budgetMs` of this thread's CPU time,
   * the time being a backstop of the running service. The wall clock alone also runs while a
   * busy machine has the thread waiting for a core (a load of 18 on two cores stopped ordinary
   * templates at 50 ms; a preview thread of lower priority beside busy cores, at 5 ms): the
   * meter lets a render go on while its thread has spent less than the budget (WorkMeter), so
   * a template's mail and preview never depend on the machine's load, and no template costs
   * more than about its budget of CPU.
   */
  #renderWithin (values: PartValues, budgetMs: number, wallLimitMs: number): CodePieces | TemplateRuleError {
    return this.#render(values, new WorkMeter(RENDER_WORK_LIMIT, { now: performance.now(), cpu: { budgetMs, cpuMs: threadCpuMs }, wallLimitMs }))
  }

  /** The rendered pieces around the code, or the rule the render broke, within what `meter` allows. */
  #render (values: PartValues, meter: WorkMeter): CodePieces | TemplateRuleError {
    let output: string
    try {
      const context = new Context({
        code: CODE_MARK,
        minutes: values.minutes,
        brand: values.brand,
        locale: this.#locale,
        requestedAt: values.requestedAt,
        constants: this.#constants
      }, this.#engine.options, { sync: true }, { renderLimit: meter as unknown as Context['renderLimit'], memoryLimit: meter.memory as unknown as Context['memoryLimit'], liquid: this.#engine })
      // Synchronous: a template does no I/O, and LiquidJS's async render costs about four
      // times the CPU of renderSync (a promise per node: 400 µs against 100 µs for an HTML
      // part with a date, measured on Node 20).
      output = String(this.#engine.renderSync(this.#templates, context))
    } catch (error) {
      return new TemplateRuleError(`the template does not render: ${describeLiquidError(error)}`)
    }
    // Measured before anything walks the string: a runaway output is refused unread.
    if (output.length > OUTPUT_LIMITS[this.part] + CODE_MARK.length) return new TemplateRuleError(`the output is larger than ${OUTPUT_LIMITS[this.part]} characters (${output.length})`)
    if (this.part === 'subject') output = singleLine(output)
    const pieces = CodePieces.split(output, CODE_MARK)
    if (this.part === 'subject') {
      if (output === '') return new TemplateRuleError('the subject renders empty')
      return pieces
    }
    if (pieces.codes !== 1) return new TemplateRuleError(`the output must contain the code exactly once; it has it ${pieces.codes} times`)
    return pieces
  }
}
