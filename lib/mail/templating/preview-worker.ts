import { LruMap } from 'toad-cache'
import { CompiledPart, TemplateRuleError, threadCpuMs, type Part, type PartRecipe, type PartValues } from './liquid.js'

/** One preview's custom parts, rendered in order in the preview thread. */
export interface PreviewJob {
  recipes: PartRecipe[]
  values: PartValues
  code: string
}

/**
 * Each part rendered, or the first rule one broke (the preview then falls back, as dispatch
 * would); `cpuMs`: what the renders cost this thread, which the tenant's turn is charged.
 */
export type PreviewOutcome =
  | { rendered: Partial<Record<Part, string>>, cpuMs: number }
  | { broken: { part: Part, rule: string }, cpuMs: number }

/**
 * Parts compiled in this thread, by everything that makes them: a tenant's previews compile
 * once per tenants-file version. Bounded, so reloads that change templates cannot grow it.
 */
const compiled = new LruMap<CompiledPart>(256)

function compile (recipe: PartRecipe): CompiledPart {
  const id = `${recipe.part}\u0000${recipe.locale}\u0000${JSON.stringify(recipe.constants)}\u0000${recipe.source}`
  let part = compiled.get(id)
  if (part === undefined) {
    // Checked at load already (with its test renders); compiled again here without them.
    part = CompiledPart.compile(recipe.source, recipe.part, recipe.locale, recipe.constants, [])
    compiled.set(id, part)
  }
  return part
}

/** The preview thread's task (piscina): renders every part afresh within its render budget. */
export default function renderPreview (job: PreviewJob): PreviewOutcome {
  const started = threadCpuMs()
  const rendered: Partial<Record<Part, string>> = {}
  for (const recipe of job.recipes) {
    try {
      rendered[recipe.part] = compile(recipe).renderFresh(job.values, job.code)
    } catch (error) {
      if (!(error instanceof TemplateRuleError)) throw error
      return { broken: { part: recipe.part, rule: error.rule }, cpuMs: threadCpuMs() - started }
    }
  }
  return { rendered, cpuMs: threadCpuMs() - started }
}
