import { CaptureTag, CaseTag, Drop, Token, evalToken, toValue, toValueSync, type Context, type Emitter, type FilterImplOptions, type Liquid, type Operators, type Template } from 'liquidjs'

/*
 * The bounds of a render, independent of what LiquidJS charges on its own.
 *
 * LiquidJS checks its time limit (`renderLimit`) only between template nodes, and charges its
 * allocation limit (`memoryLimit`) in some tags and filters only (ranges, string-building
 * filters, escapes, date widths, `json`): a single filter, comparison or tag could still run
 * for a second (bench/liquid-limits.ts measures each case). Here every place a render can
 * spend time is counted as work, and bounded by size:
 *
 * - between nodes: LiquidJS's own check, which the render's WorkMeter stands in for: one unit
 *   of work a node (an empty loop body too), and the time budget of a dispatch or a preview;
 * - every filter call (the filters are wrapped: each calls the original) and every
 *   comparison (the operators are wrapped the same way), before and after: no filter or
 *   comparison takes or returns a string longer than VALUE_LIMIT or an array longer than
 *   ARRAY_LIMIT, so none costs more than a fraction of a millisecond, and each is charged
 *   for the size of what it takes and gives;
 * - `case` compares through the bounded `==`, one value at a time, and a capture is bounded
 *   like a filter's result;
 * - ranges, which a tag may build without a filter, are charged to LiquidJS's memoryLimit;
 * - a tag takes at most TAG_ARGUMENT_LIMIT values (a `when` list, `cycle` candidates), checked
 *   at load, so no tag loops over thousands of them between two checks.
 *
 * Whether a template is accepted at load depends on the work its test renders count, never on
 * the clock: the same template is accepted or refused on an idle and on a saturated machine.
 * Time bounds only the renders of a running service (dispatch, preview), as a backstop.
 */

/**
 * CPU time a part's preview may take (the preview thread's: see WorkMeter); past it the render
 * stops. Several times what a template accepted at load takes (LOAD_WORK_LIMIT, about 2.5 ms),
 * and well above the few ms by which the thread CPU clock may lag (Linux brings it up to date
 * at the scheduler's ticks, 4 ms apart at 250 Hz): at 5 ms, a preview of an ordinary template
 * on a busy machine was cut off now and then.
 */
export const RENDER_BUDGET_MS = 15
/**
 * Time a part's render for dispatch may take (the process's CPU time: see CompiledPart); past
 * it the mail goes out in the built-in wording. Twenty times what a template accepted at load
 * takes, so that a busy moment (another process on the core, a garbage collection) never
 * changes a tenant's mail. Dispatch renders are kept for the minute (lib/mail/templating/liquid.ts), so
 * even a template that only slows down on a branch the load did not take holds the event loop
 * this long at most once a minute per part and language.
 */
export const DISPATCH_RENDER_BUDGET_MS = 50
/** Longest string a filter, comparison or capture may take or give, in characters. */
export const VALUE_LIMIT = 16 * 1024
/** Longest array a filter or comparison may take or give. */
export const ARRAY_LIMIT = 1000
/** LiquidJS's allocation units per render: a range `(1..n)` costs n, escapes and string filters their length. */
export const MEMORY_LIMIT = 50_000
/** Values one tag may take (a `case` tag's `when` values, `cycle` candidates…), checked at load. */
export const TAG_ARGUMENT_LIMIT = 64
/** Longest format of the `date` filter: each directive costs tens of microseconds (month and day names). */
export const DATE_FORMAT_LIMIT = 64

/** A render that would handle a value larger than the bounds allow. */
export class RenderBoundError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'RenderBoundError'
  }
}

const count = (value: number): string => value.toLocaleString('en')

/**
 * The size of a value: a string's characters, an array's or object's entries plus their own
 * sizes, 1 for anything else. Counting stops past `limit`; an array longer than ARRAY_LIMIT, at
 * any depth, is Infinity.
 */
function sizeOf (value: unknown, limit: number): number {
  let size = 0
  const pending: unknown[] = [value]
  while (pending.length > 0 && size <= limit) {
    const item = pending.pop()
    if (typeof item === 'string') {
      size += item.length
    } else if (Array.isArray(item)) {
      if (item.length > ARRAY_LIMIT) return Number.POSITIVE_INFINITY
      size += item.length
      pending.push(...item)
    } else if (item !== null && typeof item === 'object' && !(item instanceof Drop)) {
      const entries = Object.values(item)
      size += entries.length
      if (size <= limit) pending.push(...entries)
    } else {
      size += 1
    }
  }
  return size
}

/** Checks `value` against the bounds; its size (at most VALUE_LIMIT) when within them. */
function assertBounded (value: unknown, what: string): number {
  const size = sizeOf(value, VALUE_LIMIT)
  if (size <= VALUE_LIMIT) return size
  if (typeof value === 'string') throw new RenderBoundError(`${what} is longer than ${count(VALUE_LIMIT)} characters`)
  if (Array.isArray(value) && value.length > ARRAY_LIMIT) throw new RenderBoundError(`${what} is an array of ${count(value.length)} elements; the limit is ${count(ARRAY_LIMIT)}`)
  throw new RenderBoundError(`${what} holds more than ${count(VALUE_LIMIT)} characters, or an array of more than ${count(ARRAY_LIMIT)} elements`)
}

/**
 * Work units one render of a part may count at load (LOAD_WORK_LIMIT) and at dispatch or
 * preview (RENDER_WORK_LIMIT). A unit is a node rendered, a filter call, a comparison or a
 * `when` value; a filter, a comparison and a capture add one per CHARACTERS_PER_UNIT
 * characters (or elements) they handle, what LiquidJS charges to its memory limit (a range's
 * elements, a string a filter builds) one per ALLOCATIONS_PER_UNIT, and each month or day name
 * a `date` formats DATE_NAME_UNITS. Calibrated on this project's 2-core
 * machines (`npm run bench:liquid-limits`): a unit costs about 250 ns of CPU at most, so
 * LOAD_WORK_LIMIT is about 2.5 ms of render, half the 5 ms of the clock-based rule it replaces.
 */
export const LOAD_WORK_LIMIT = 10_000
/** Twice the load's: a branch the test renders did not take may cost more without being cut off. */
export const RENDER_WORK_LIMIT = 2 * LOAD_WORK_LIMIT
/**
 * Work units one Liquid output or tag counts at load for being parsed and checked (its source
 * analysed, its variables looked up), once per part whatever its test renders take: on this
 * project's 2-core machines an output costs tens of microseconds to parse and check, a unit of
 * render one to a few microseconds.
 */
export const MARKUP_WORK_UNITS = 20
/**
 * Work units all of one tenant's templates may count at load, summed over its parts and
 * languages: each part's outputs and tags (MARKUP_WORK_UNITS each) and the units of its test
 * renders. Each part within its own bounds, 150 parts at those bounds took seconds of CPU to
 * check; past this budget (a few tenths of a second) the tenant is refused alone, and its
 * checks stop there. Three parts in fifty languages, each with a few dozen outputs and tags,
 * use under half of it.
 */
export const TENANT_TEMPLATE_WORK_LIMIT = 250_000
/** The costliest filters (cgi_escape, url_encode) handle about 16 characters in the time of a node. */
export const CHARACTERS_PER_UNIT = 16
/** A range of tens of thousands of elements costs about 100 ns an element (a large array, collected). */
export const ALLOCATIONS_PER_UNIT = 4
/** A month or day name (%a %A %b %B %h) costs about 190 µs: LiquidJS asks Intl for it each time. */
export const DATE_NAME_UNITS = 750
const DATE_NAME = /%[-_0^#:]*\d*[aAbBh]/g

const sizeUnits = (characters: number): number => Math.floor(characters / CHARACTERS_PER_UNIT)

/** A render went past its work limit. */
export class WorkLimitError extends RenderBoundError {
  constructor (readonly limit: number) {
    super(`the render counts more than ${count(limit)} units of work`)
    this.name = 'WorkLimitError'
  }
}

/** A render's time budget, counted in the CPU time of the thread that renders. */
export interface CpuBudget {
  budgetMs: number
  /** The thread's CPU time in ms. Linux brings it up to date at the scheduler's ticks: it may lag by a few ms. */
  cpuMs: () => number
}

/**
 * However long a descheduled thread keeps a render waiting, it stops this long after it
 * started. On the event loop, which every request needs, ten budgets of a dispatch's render.
 * In the preview thread, shared by every tenant's previews, 250 ms: at its lower priority
 * beside busy cores it gets a twentieth of a core or more (a millisecond or so at a time), so
 * an ordinary template's preview still renders, and a tenant whose preview holds the thread
 * that long holds it only while the machine is that busy.
 */
export const DISPATCH_WALL_LIMIT_MS = 10 * DISPATCH_RENDER_BUDGET_MS
export const PREVIEW_WALL_LIMIT_MS = 250

/**
 * What a render may spend, standing in for LiquidJS's render and memory limiters
 * (`Context#renderLimit`, which LiquidJS checks between nodes, and `Context#memoryLimit`): it
 * counts work against `workLimit`, LiquidJS's allocations against MEMORY_LIMIT, and, for
 * renders of a running service, the time against a budget (none at load, where no decision
 * reads the clock). The wall clock is read between nodes (cheap); only once it passes the
 * budget is the thread's CPU time read: a render whose thread spent less than the budget was
 * waiting for a core, not working, and goes on, up to the wall limit it was given. Stopped by
 * the wall clock alone, a render on a busy machine was cut off however little it cost, and
 * the tenant's preview showed the built-in wording.
 */
export class WorkMeter {
  /** Units counted so far. */
  spent = 0
  #allocated = 0
  #deadline: number
  readonly #wallLimit: number
  readonly #cpu: CpuBudget | null
  readonly #cpuStart: number

  constructor (readonly workLimit: number, time: { now: number, cpu: CpuBudget, wallLimitMs: number } | null = null) {
    this.#cpu = time?.cpu ?? null
    this.#deadline = time === null ? Number.POSITIVE_INFINITY : time.now + time.cpu.budgetMs
    this.#wallLimit = time === null ? Number.POSITIVE_INFINITY : time.now + time.wallLimitMs
    this.#cpuStart = time === null ? 0 : time.cpu.cpuMs()
  }

  /** LiquidJS's call between nodes: one unit, and the time (with LiquidJS's own message). */
  check (now: number): void {
    this.charge(1)
    if (now > this.#deadline) this.#pastDeadline(now)
  }

  #pastDeadline (now: number): void {
    const cpu = this.#cpu
    if (cpu !== null && now < this.#wallLimit) {
      const spentMs = cpu.cpuMs() - this.#cpuStart
      if (spentMs < cpu.budgetMs) {
        // Read again once the rest of the budget could have been spent, never later than the bound.
        this.#deadline = Math.min(this.#wallLimit, now + cpu.budgetMs - spentMs)
        return
      }
    }
    throw new Error('template render limit exceeded')
  }

  charge (units: number): void {
    this.spent += units
    if (this.spent > this.workLimit) throw new WorkLimitError(this.workLimit)
  }

  /** LiquidJS's memory limiter, with its own message: allocations count as work too. */
  readonly memory = {
    use: (units: number): void => {
      if (!(units > 0)) return
      if (this.#allocated + units > MEMORY_LIMIT) throw new Error('memory alloc limit exceeded')
      this.#allocated += units
      this.charge(Math.floor(units / ALLOCATIONS_PER_UNIT))
    },
    check: (): void => {}
  }
}

/** Charges `units` besides the step itself, and checks the time, as LiquidJS does between nodes. */
function step (context: Context, units = 0): void {
  const meter = context.renderLimit as unknown
  if (units > 0 && meter instanceof WorkMeter) meter.charge(units)
  context.renderLimit.check(performance.now())
}

type FilterHandler = Extract<FilterImplOptions, (...args: never[]) => unknown>
type FilterThis = ThisParameterType<FilterHandler>

/** Extra checks of one filter's arguments, before it runs. */
const ARGUMENT_RULES: Readonly<Record<string, (args: readonly unknown[]) => void>> = {
  date: ([, format]) => {
    if (typeof format === 'string' && format.length > DATE_FORMAT_LIMIT) throw new RenderBoundError(`the date filter's format is longer than ${DATE_FORMAT_LIMIT} characters`)
  }
}

/** Work a filter's arguments cost beyond their size: a date's month and day names. */
const ARGUMENT_UNITS: Readonly<Record<string, (args: readonly unknown[]) => number>> = {
  date: ([, format]) => typeof format === 'string' ? (format.match(DATE_NAME)?.length ?? 0) * DATE_NAME_UNITS : 0
}

export function boundedFilter (name: string, handler: FilterHandler): FilterHandler {
  const rule = ARGUMENT_RULES[name]
  const units = ARGUMENT_UNITS[name]
  return function * (this: FilterThis, ...args: unknown[]): Generator<unknown, unknown, unknown> {
    step(this.context)
    let size = 0
    for (const [index, arg] of args.entries()) size += assertBounded(arg, index === 0 ? `the ${name} filter's input` : `an argument of the ${name} filter`)
    rule?.(args)
    step(this.context, sizeUnits(size) + (units?.(args) ?? 0))
    const result = yield handler.apply(this, args as [unknown, ...unknown[]])
    step(this.context, sizeUnits(assertBounded(result, `the ${name} filter's result`)))
    return result
  }
}

/** Every filter of `engine` replaced by its bounded twin. */
export function boundFilters (engine: Liquid): void {
  for (const [name, filter] of Object.entries(engine.filters)) {
    if (typeof filter === 'function') engine.registerFilter(name, boundedFilter(name, filter))
    else engine.registerFilter(name, { ...filter, handler: boundedFilter(name, filter.handler) })
  }
}

/** Every operator (`==`, `contains`, `and`…), time-checked and with its operands bounded, calling LiquidJS's own. */
export function boundedOperators (operators: Operators): Operators {
  return Object.fromEntries(Object.entries(operators).map(([name, operator]) => [name, function * (...args: unknown[]): Generator<unknown, boolean, unknown> {
    const context = args.at(-1) as Context
    step(context)
    let size = 0
    for (const operand of args.slice(0, -1)) size += assertBounded(toValue(operand), `an operand of ${name}`)
    step(context, sizeUnits(size))
    return (yield (operator as (...operands: unknown[]) => unknown)(...args)) as boolean
  }])) as unknown as Operators
}

/** `capture`, whose result is bounded like a filter's: a string doubled by capturing it twice stops at VALUE_LIMIT. */
export class BoundedCaptureTag extends CaptureTag {
  override * render (ctx: Context): Generator<unknown, void, string> {
    yield * super.render(ctx)
    // The scope capture writes to is a plain object (a Drop only when a caller passes one).
    step(ctx, sizeUnits(assertBounded((ctx.bottom() as Record<string, unknown>)[this.variable], `the capture ${this.variable}`)))
  }
}

/**
 * `case`, comparing with the bounded `==` and checking the time before each `when` value.
 * LiquidJS's own compares every value of every `when` in one step, with no check between.
 */
export class BoundedCaseTag extends CaseTag {
  override * render (ctx: Context, emitter: Emitter): Generator<unknown, void, unknown> {
    const equals = ctx.opts.operators['=='] as (lhs: unknown, rhs: unknown, context: Context) => unknown
    const target = yield toValue(yield this.value.value(ctx, ctx.opts.lenientIf))
    for (const branch of this.branches) {
      for (const token of branch.values) {
        const value = yield evalToken(token, ctx, ctx.opts.lenientIf)
        if ((yield equals(target, value, ctx)) === true) {
          yield this.liquid.renderer.renderTemplates(branch.templates, ctx, emitter)
          return
        }
      }
    }
    yield this.liquid.renderer.renderTemplates(this.elseTemplates, ctx, emitter)
  }
}

/** The first tag, through every nested one, that takes more than TAG_ARGUMENT_LIMIT values, as a rule broken; null if none. */
export function tagArgumentProblem (templates: readonly Template[]): string | null {
  for (const template of templates) {
    if (typeof template.arguments === 'function') {
      const values = [...template.arguments()].length
      if (values > TAG_ARGUMENT_LIMIT) {
        const [row, col] = template.token.getPosition()
        return `the tag ${JSON.stringify(template.token.getText().slice(0, 40))}… (line ${row ?? '?'}, column ${col ?? '?'}) takes ${values} values; a tag takes at most ${TAG_ARGUMENT_LIMIT}`
      }
    }
    if (typeof template.children === 'function') {
      const problem = tagArgumentProblem(toValueSync(template.children(false, true)))
      if (problem !== null) return problem
    }
  }
  return null
}

/*
 * Loading a part is bounded too. LiquidJS's Token#getPosition counts rows and columns from the
 * start of the source on every call, and static analysis calls it for every variable: a
 * 256 KiB part with 23,000 outputs took about 15 s to load, on the event loop, at start-up or
 * on SIGHUP. The same answer comes from a line index of the source, built once per source.
 */
/**
 * Most Liquid outputs and tags one part may hold. Parsing costs about 50 µs each: 23,000 of
 * them in a 256 KiB part took 1.4 s to load. A mail's template needs a few dozen.
 */
export const MARKUP_LIMIT = 1000

/** The outputs and tags a source opens, counted before it is parsed; at most `limit + 1`. */
export function markupCount (source: string, limit = MARKUP_LIMIT): number {
  let count = 0
  for (let at = source.indexOf('{'); at !== -1 && count <= limit; at = source.indexOf('{', at + 1)) {
    const next = source.charCodeAt(at + 1)
    if (next === 123 || next === 37) count++
  }
  return count
}

let indexedSource = ''
let lineStarts: number[] = [0]

function lineStartsOf (source: string): number[] {
  if (source !== indexedSource) {
    const starts = [0]
    for (let at = source.indexOf('\n'); at !== -1; at = source.indexOf('\n', at + 1)) starts.push(at + 1)
    indexedSource = source
    lineStarts = starts
  }
  return lineStarts
}

/** Row and column (both from 1) of `offset` in `source`, as LiquidJS counts them. */
export function positionIn (source: string, offset: number): [number, number] {
  const starts = lineStartsOf(source)
  let low = 0
  let high = starts.length - 1
  while (low < high) {
    const middle = (low + high + 1) >> 1
    if ((starts[middle] ?? 0) <= offset) low = middle
    else high = middle - 1
  }
  return [low + 1, offset - (starts[low] ?? 0) + 1]
}

Token.prototype.getPosition = function getPosition (this: Token): [number, number] {
  return positionIn(this.input, this.begin)
}
