import { CompiledPart, PARTS, type Part } from '../../lib/mail/templating/liquid.js'
import { TENANT_TEMPLATE_WORK_LIMIT } from '../../lib/mail/templating/liquid-bounds.js'

/**
 * One language's subject, text and HTML, each near the bounds a part has on its own: hundreds
 * of outputs and tags (under MARKUP_LIMIT), every line an output to escape and a branch to
 * take. What a tenant's wording can cost at load without breaking any rule of one part.
 */
export function costlyLanguage (locale: string): Record<Part, string> {
  return {
    subject: `Code {{ brand }} ${locale}`,
    text: '{{ brand }} {{ minutes }}\n'.repeat(300) + '{{ code }}\n',
    html: '<p>{{ brand }} {{ minutes }} {% if minutes > 5 %}a{% else %}b{% endif %}</p>\n'.repeat(190) + '<b>{{ code }}</b>'
  }
}

/** Two-letter language tags, `aa`, `ab`, …: none has built-in wording, so each needs all three parts. */
function languages (count: number): string[] {
  const letters = 'abcdefghijklmnopqrstuvwxyz'
  return Array.from({ length: count }, (_, index) => `${letters[Math.floor(index / 26) % 26] ?? 'a'}${letters[index % 26] ?? 'a'}`)
}

/**
 * The most costly wording one tenant may have: as many languages of `costlyLanguage` as fit in
 * TENANT_TEMPLATE_WORK_LIMIT (`extra` more to go past it), their work counted as the load
 * counts it (test renders with minutes 1 and 10, and `brand`).
 */
export function costliestAcceptedTemplates (brand: string, extra = 0): { templates: Record<string, Record<Part, string>>, parts: number } {
  const samples = [1, 10].map((minutes) => ({ brand, minutes, requestedAt: '2026-01-31T09:05Z' }))
  const sample = costlyLanguage('aa')
  const perLanguage = PARTS.reduce((sum, part) => sum + CompiledPart.compile(sample[part], part, 'aa', {}, samples).loadWork, 0)
  const count = Math.floor(TENANT_TEMPLATE_WORK_LIMIT / perLanguage) + extra
  return { templates: Object.fromEntries(languages(count).map((locale) => [locale, costlyLanguage(locale)])), parts: count * PARTS.length }
}
