import { randomBytes } from 'node:crypto'
import { Liquid, Output, toValueSync, type FS, type Template } from 'liquidjs'

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
/**
 * LiquidJS checks the time before rendering each node: a render still running after this
 * long stops. A time bound depends on the machine's load, so it is generous: what stops a
 * runaway loop deterministically is the allocation bound below.
 */
export const RENDER_LIMIT_MS = 1000
/**
 * LiquidJS charges ranges (`(1..n)` costs n), string-building filters and every escaped
 * output against this per render; a loop over a range of a million numbers, or a string
 * doubled in a loop, stops here whatever the machine.
 */
export const MEMORY_LIMIT = 500_000

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
 * not exist (strict: a typo is an error, not an empty string), or run without bounds (parse,
 * time and allocation limits).
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
      ...(escaped ? { outputEscape: 'escape' as const } : {}),
      locale,
      timezoneOffset: 0,
      parseLimit: SOURCE_LIMITS.html,
      renderLimit: RENDER_LIMIT_MS,
      memoryLimit: MEMORY_LIMIT
    })
    for (const tag of FILE_TAGS) Reflect.deleteProperty(engine.tags, tag)
    Reflect.deleteProperty(engine.filters, 'raw')
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
  if (message.startsWith('template render limit exceeded')) return `the render takes longer than ${RENDER_LIMIT_MS} ms (${message})`
  if (message.startsWith('memory alloc limit exceeded')) return `the render allocates more than the limit of ${MEMORY_LIMIT.toLocaleString('en')} units: a loop or a string grows too large (${message})`
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
export class CompiledPart {
  readonly part: Part
  readonly #engine: Liquid
  readonly #templates: Template[]
  readonly #locale: string
  readonly #constants: Readonly<Record<string, string>>
  #key: string | null = null
  #pieces: readonly string[] | TemplateRuleError = []

  private constructor (part: Part, engine: Liquid, templates: Template[], locale: string, constants: Readonly<Record<string, string>>) {
    this.part = part
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
    if (source.length > SOURCE_LIMITS[part]) throw new TemplateRuleError(`the template is longer than ${SOURCE_LIMITS[part]} characters`)
    const engine = engineFor(locale, part)
    let templates: Template[]
    try {
      templates = engine.parse(source)
    } catch (error) {
      throw new TemplateRuleError(`the template does not parse: ${describeLiquidError(error)}`)
    }
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
    const compiled = new CompiledPart(part, engine, templates, locale, constants)
    for (const sample of samples) {
      const pieces = compiled.#render(sample)
      if (pieces instanceof TemplateRuleError) throw new TemplateRuleError(`${pieces.rule} (test render with minutes = ${sample.minutes})`)
    }
    return compiled
  }

  /** The part with `code` in it; throws TemplateRuleError when these values break a rule. */
  render (values: PartValues, code: string): string {
    const key = `${values.minutes}\u0000${values.requestedAt}\u0000${values.brand}`
    if (key !== this.#key) {
      this.#pieces = this.#render(values)
      this.#key = key
    }
    if (this.#pieces instanceof TemplateRuleError) throw this.#pieces
    return this.#pieces.join(code)
  }

  /** The rendered pieces around the code, or the rule the render broke. */
  #render (values: PartValues): readonly string[] | TemplateRuleError {
    let output: string
    try {
      // Synchronous: a template does no I/O, and LiquidJS's async render costs about four
      // times the CPU of renderSync (a promise per node: 400 µs against 100 µs for an HTML
      // part with a date, measured on Node 20).
      output = String(this.#engine.renderSync(this.#templates, {
        code: CODE_MARK,
        minutes: values.minutes,
        brand: values.brand,
        locale: this.#locale,
        requestedAt: values.requestedAt,
        constants: this.#constants
      }))
    } catch (error) {
      return new TemplateRuleError(`the template does not render: ${describeLiquidError(error)}`)
    }
    // Measured before anything walks the string: a runaway output is refused unread.
    if (output.length > OUTPUT_LIMITS[this.part] + CODE_MARK.length) return new TemplateRuleError(`the output is larger than ${OUTPUT_LIMITS[this.part]} characters (${output.length})`)
    if (this.part === 'subject') output = singleLine(output)
    const pieces = output.split(CODE_MARK)
    if (this.part === 'subject') {
      if (output === '') return new TemplateRuleError('the subject renders empty')
      return pieces
    }
    if (pieces.length !== 2) return new TemplateRuleError(`the output must contain the code exactly once; it has it ${pieces.length - 1} times`)
    return pieces
  }
}
