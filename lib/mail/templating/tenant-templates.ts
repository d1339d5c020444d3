import { createHash } from 'node:crypto'
import { CompiledPart, PARTS, SOURCE_LIMITS, TemplateRuleError, singleLine, type Part, type PartValues } from './liquid.js'
import type { BodyPieces } from '../../code-pieces.js'
import { TENANT_TEMPLATE_WORK_LIMIT } from './liquid-bounds.js'
import { renderInPreviewThread } from './preview-renderer.js'
import { DEFAULT_LOCALE, SUPPORTED_LOCALES, isBuiltinLocale, matchLocale, negotiateLocale, type Locale, type LocaleChoice } from './locale.js'
import type { TenantTemplateFolder } from './template-files.js'
import { BUILTIN_PARTS } from './templates.js'

/** A template as the tenants file gives it: the Liquid source inline, or a file in the tenant's template folder. */
export type TemplateSource = string | { file: string }

/** A tenant's message settings, as in its tenants file entry. */
export interface TemplatesEntry {
  templates?: Record<string, Partial<Record<Part, TemplateSource>>>
  constants?: Record<string, string>
  defaultLocale?: string
}

export interface TemplatesLoadOptions {
  /** The tenant's template folder, where `{ "file": … }` templates are read; null: inline templates only. */
  folder: TenantTemplateFolder | null
  /** The tenant's brand, for the test renders. */
  brand: string
  /** Lifetimes, in minutes, the test renders use besides 1 and 10 (the tenant's own, when it sets one). */
  minutes?: readonly number[]
  /** The parts earlier loads checked, reused when nothing a check reads has changed; none: every part is checked. */
  checked?: CheckedParts
}

/** What checking one part found: the part ready for dispatch, or the rule it breaks. */
type PartCheck = { compiled: CompiledPart } | { rule: string }

/**
 * The parts checked by one load of the tenants file, by a digest of everything a check reads
 * (the source, part, language, constants and test-render values; the bounds are the process's
 * own), reused by the next load: a reload where one tenant's key changed checks none of the
 * templates again. A load keeps only the parts it used, so what a file no longer holds is let go.
 */
export class CheckedParts {
  readonly #earlier: ReadonlyMap<string, PartCheck>
  readonly #now = new Map<string, PartCheck>()
  /** Parts this load parsed and test-rendered. */
  checked = 0
  /** Parts this load took from the one before. */
  reused = 0

  /** `earlier`: the previous load's parts. */
  constructor (earlier: CheckedParts | null = null) {
    this.#earlier = earlier === null ? new Map() : earlier.#now
  }

  /** The check of a part, from an earlier load when one checked the same; checked here otherwise, a step at a time. */
  * check (source: string, part: Part, locale: string, constants: Readonly<Record<string, string>>, samples: readonly PartValues[]): Generator<void, PartCheck, void> {
    const digest = createHash('sha256').update(JSON.stringify([part, locale, constants, samples])).update('\u0000').update(source).digest('base64')
    let found = this.#now.get(digest) ?? this.#earlier.get(digest)
    if (found === undefined) {
      found = yield * checkPart(source, part, locale, constants, samples)
      this.checked++
    } else {
      this.reused++
    }
    this.#now.set(digest, found)
    return found
  }
}

/**
 * A template refused at load: its language (null for all of the tenant's templates), its part
 * (null for the language as a whole) and the rule.
 */
export interface TemplateProblem {
  locale: string | null
  part: Part | null
  /** Where in the tenant's entry, as a JSON pointer from it: `templates/fr/subject`, `defaultLocale`. */
  pointer: string
  rule: string
}

export class TemplatesError extends Error {
  constructor (readonly problems: readonly TemplateProblem[]) {
    super(problems.map((problem) => `${problem.locale ?? 'templates'}${problem.part === null ? '' : `/${problem.part}`}: ${problem.rule}`).join('; '))
    this.name = 'TemplatesError'
  }
}

/** A message ready for compose: every part rendered with the code. */
export interface RenderedMessage {
  locale: string
  subject: string
  text: string
  html: string
}

/** The built-in wording has no pieces kept for the minute: each message is rendered whole. */
const BUILTIN_PIECES: BodyPieces = { text: null, html: null }

/**
 * A tenant's template that broke a rule when rendered for a dispatch (a branch the load's test
 * renders did not take): the message went out in the built-in wording instead.
 */
export interface TemplateFallback {
  locale: string
  part: Part
  rule: string
}

export interface RenderInput {
  brand: string
  code: string
  minutes: number
  /** ISO 8601, UTC, to the minute: `2026-05-01T12:34Z`. */
  requestedAt: string
}

/** The request time as templates see it: to the minute, so that a minute's dispatches share one render. */
export function requestTime (date: Date): string {
  return `${date.toISOString().slice(0, 16)}Z`
}

const SAMPLE_TIME = '2026-01-31T09:05Z'
/** A file larger than this many bytes cannot be within the character limits, whatever its encoding. */
const BYTES_PER_CHARACTER = 4

function * checkPart (source: string, part: Part, locale: string, constants: Readonly<Record<string, string>>, samples: readonly PartValues[]): Generator<void, PartCheck, void> {
  try {
    return { compiled: yield * CompiledPart.compiling(source, part, locale, constants, samples) }
  } catch (error) {
    if (!(error instanceof TemplateRuleError)) throw error
    return { rule: error.rule }
  }
}

function readSource (source: TemplateSource, part: Part, folder: TenantTemplateFolder | null): string {
  if (typeof source === 'string') return source
  if (folder === null) throw new TemplateRuleError(`file ${JSON.stringify(source.file)} cannot be read: template files are read from the tenant's template folder, and this tenants file was loaded without one`)
  return folder.read(source.file, SOURCE_LIMITS[part] * BYTES_PER_CHARACTER)
}

/**
 * One tenant's message wording: its own Liquid templates where it has them (per language and
 * part, parsed and checked once per load), the service's built-in wording everywhere else.
 * Immutable but for each part's render cache; a reload builds a new one.
 */
export class TenantTemplates {
  /** The languages the tenant's mail can be written in, its default first. */
  readonly locales: readonly string[]
  readonly defaultLocale: string
  readonly #custom: ReadonlyMap<string, Partial<Record<Part, CompiledPart>>>
  readonly #choice: LocaleChoice

  private constructor (custom: Map<string, Partial<Record<Part, CompiledPart>>>, defaultLocale: string) {
    this.#custom = custom
    this.defaultLocale = defaultLocale
    const all = new Set<string>([defaultLocale, ...SUPPORTED_LOCALES, ...custom.keys()])
    this.locales = [...all]
    this.#choice = { available: this.locales, fallback: defaultLocale }
  }

  /** The service's own wording in its four languages, English first. */
  static readonly builtin = new TenantTemplates(new Map(), DEFAULT_LOCALE)

  /**
   * Reads, parses and checks every template of a tenant entry. Throws TemplatesError listing
   * every template that breaks a rule (all of them, not only the first).
   */
  static load (entry: TemplatesEntry, options: TemplatesLoadOptions): TenantTemplates {
    const steps = TenantTemplates.loading(entry, options)
    for (let step = steps.next(); ; step = steps.next()) if (step.done === true) return step.value
  }

  /**
   * `load` one part at a time: the generator pauses after each part it checks, so that a
   * caller can let other work run between parts (a reload of the tenants file does). Past
   * TENANT_TEMPLATE_WORK_LIMIT it stops checking, and throws TemplatesError with that problem.
   */
  static * loading (entry: TemplatesEntry, options: TemplatesLoadOptions): Generator<void, TenantTemplates, void> {
    const templates = entry.templates ?? {}
    if (Object.keys(templates).length === 0 && entry.defaultLocale === undefined) return TenantTemplates.builtin
    const constants = Object.freeze({ ...entry.constants })
    const brand = singleLine(options.brand)
    const samples: PartValues[] = [...new Set([1, 10, ...(options.minutes ?? [])])].map((minutes) => ({ brand, minutes, requestedAt: SAMPLE_TIME }))
    const checked = options.checked ?? new CheckedParts()
    const problems: TemplateProblem[] = []
    const custom = new Map<string, Partial<Record<Part, CompiledPart>>>()
    let work = 0
    for (const [locale, sources] of Object.entries(templates)) {
      const missing = PARTS.filter((part) => sources[part] === undefined)
      if (!isBuiltinLocale(locale) && missing.length > 0) {
        problems.push({ locale, part: null, pointer: `templates/${locale}`, rule: `the service has no wording of its own in ${locale}: subject, text and html are all required (missing: ${missing.join(', ')})` })
      }
      const compiled: Partial<Record<Part, CompiledPart>> = {}
      for (const part of PARTS) {
        const source = sources[part]
        if (source === undefined) continue
        let outcome: PartCheck
        try {
          outcome = yield * checked.check(readSource(source, part, options.folder), part, locale, constants, samples)
        } catch (error) {
          if (!(error instanceof TemplateRuleError)) throw error
          outcome = { rule: error.rule }
        }
        if ('rule' in outcome) {
          problems.push({ locale, part, pointer: `templates/${locale}/${part}`, rule: outcome.rule })
        } else {
          compiled[part] = outcome.compiled
          work += outcome.compiled.loadWork
        }
        if (work > TENANT_TEMPLATE_WORK_LIMIT) {
          problems.push({ locale: null, part: null, pointer: 'templates', rule: `the templates count more than ${TENANT_TEMPLATE_WORK_LIMIT.toLocaleString('en')} units of work at load (${locale}/${part} goes past it; the parts after it are not checked); all of a tenant's templates may count at most that` })
          throw new TemplatesError(problems)
        }
        yield
      }
      custom.set(locale, compiled)
    }
    const defaultLocale = entry.defaultLocale ?? DEFAULT_LOCALE
    if (!isBuiltinLocale(defaultLocale) && !custom.has(defaultLocale)) {
      problems.push({ locale: defaultLocale, part: null, pointer: 'defaultLocale', rule: `defaultLocale ${defaultLocale} has neither built-in wording nor templates in this tenant` })
    }
    if (problems.length > 0) throw new TemplatesError(problems)
    return new TenantTemplates(custom, defaultLocale)
  }

  /** The language of a dispatch: the body's `locale`, else Accept-Language, else the tenant's default. */
  negotiate (explicit: string | undefined, acceptLanguage: string | undefined): string {
    return negotiateLocale(explicit, acceptLanguage, this.#choice)
  }

  /** The language among `locales` that an explicit request names (`fr-CA` → `fr`), if any. */
  match (explicit: string): string | undefined {
    return matchLocale(explicit, this.#choice)
  }

  /** The parts the tenant wrote itself in a language (the rest are built in). */
  customParts (locale: string): Part[] {
    const parts = this.#custom.get(locale)
    return parts === undefined ? [] : PARTS.filter((part) => parts[part] !== undefined)
  }

  /**
   * Renders the message in `locale` (one of `locales`), as dispatch sends it: each part's pieces
   * are kept for the next dispatches of the same minute. A tenant's part that breaks a rule
   * for these values (possible only through a branch the load's test renders did not take, or
   * a render that ran out of its time budget) makes the whole message fall back to the
   * built-in wording, reported in `fallback`: a dispatch never fails, and never sends a message
   * that breaks the rules, because of a template.
   */
  render (locale: string, input: RenderInput): RenderedMessage & { pieces: BodyPieces, fallback: TemplateFallback | null } {
    // Straight-line on purpose: it runs on every dispatch, and a generator shared with preview
    // cost 0.4 µs more per message (npm run bench:templates).
    const parts = this.#custom.get(locale)
    const builtin: Locale = isBuiltinLocale(locale) ? locale : DEFAULT_LOCALE
    if (parts === undefined) return { ...this.#builtin(builtin, input), pieces: BUILTIN_PIECES, fallback: null }
    const values: PartValues = { brand: input.brand, minutes: input.minutes, requestedAt: input.requestedAt }
    let part: Part = 'subject'
    try {
      const subject = parts.subject?.render(values, input.code) ?? BUILTIN_PARTS.subject(builtin, input.brand)
      part = 'text'
      const textPieces = parts.text?.pieces(values) ?? null
      const text = textPieces === null ? BUILTIN_PARTS.text(builtin, input.brand, input.code, input.minutes) : textPieces.splice(input.code)
      part = 'html'
      const htmlPieces = parts.html?.pieces(values) ?? null
      const html = htmlPieces === null ? BUILTIN_PARTS.html(builtin, input.brand, input.code, input.minutes) : htmlPieces.splice(input.code)
      return { locale, subject, text, html, pieces: { text: textPieces, html: htmlPieces }, fallback: null }
    } catch (error) {
      if (!(error instanceof TemplateRuleError)) throw error
      return { ...this.#builtin(builtin, input), pieces: BUILTIN_PIECES, fallback: { locale, part, rule: error.rule } }
    }
  }

  /**
   * Renders the message in `locale` afresh, for a preview: the pieces dispatches use are neither
   * read nor replaced, and the tenant's parts render in the preview thread
   * (lib/mail/templating/preview-renderer.ts), so a costly template never holds the event loop. Falls back
   * as `render` does. `renderMs`: the CPU time the tenant's parts took there.
   */
  async preview (locale: string, input: RenderInput): Promise<RenderedMessage & { fallback: TemplateFallback | null, renderMs: number }> {
    const parts = this.#custom.get(locale)
    const builtin: Locale = isBuiltinLocale(locale) ? locale : DEFAULT_LOCALE
    if (parts === undefined) return { ...this.#builtin(builtin, input), fallback: null, renderMs: 0 }
    const values: PartValues = { brand: input.brand, minutes: input.minutes, requestedAt: input.requestedAt }
    const recipes = PARTS.flatMap((part) => parts[part]?.recipe ?? [])
    const outcome = await renderInPreviewThread({ recipes, values, code: input.code })
    if ('broken' in outcome) return { ...this.#builtin(builtin, input), fallback: { locale, ...outcome.broken }, renderMs: outcome.cpuMs }
    const own = outcome.rendered
    return {
      locale,
      subject: own.subject ?? BUILTIN_PARTS.subject(builtin, input.brand),
      text: own.text ?? BUILTIN_PARTS.text(builtin, input.brand, input.code, input.minutes),
      html: own.html ?? BUILTIN_PARTS.html(builtin, input.brand, input.code, input.minutes),
      fallback: null,
      renderMs: outcome.cpuMs
    }
  }

  #builtin (locale: Locale, input: RenderInput): RenderedMessage {
    return {
      locale,
      subject: BUILTIN_PARTS.subject(locale, input.brand),
      text: BUILTIN_PARTS.text(locale, input.brand, input.code, input.minutes),
      html: BUILTIN_PARTS.html(locale, input.brand, input.code, input.minutes)
    }
  }
}
