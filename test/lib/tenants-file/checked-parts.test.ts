/*
 * A reload reuses a template part only when everything its check read is unchanged: the
 * source, and the constants, brand and lifetime its test renders use. Anything else is
 * checked again, so a reused part is never one the new file would refuse or render otherwise.
 */
import { writeFileSync } from 'node:fs'
import t from 'tap'
import { CheckedParts } from '../../../lib/mail/templating/tenant-templates.js'
import { registryFromFile } from '../../../lib/tenants-file/load.js'
import type { TenantsFile } from '../../../schemas/tenants.js'
import { writeTenants } from '../../helper.js'

const sample = { requestedAt: '2026-01-31T09:05Z', minutes: 10, code: '123456', brand: 'Acme' }

t.test('a part is reused only when its source and every value its check reads are unchanged', async (t) => {
  const { path, file } = writeTenants(t, (file) => {
    file.tenants[0]!.constants = { site: 'acme.test' }
    file.tenants[0]!.templates = { en: { subject: 'Sign in to {{ brand }}', text: 'Code {{ code }} for {{ constants.site }}' } }
  })
  let parts = new CheckedParts()
  let registry = await registryFromFile(path, { checkedParts: parts })
  t.same([parts.checked, parts.reused], [2, 0], 'the first load checks both parts')

  const reload = async (change: (file: TenantsFile) => void): Promise<[number, number]> => {
    change(file)
    writeFileSync(path, JSON.stringify(file))
    const next = new CheckedParts(parts)
    registry = await registryFromFile(path, { checkedParts: next }, registry)
    parts = next
    return [next.checked, next.reused]
  }
  const acme = (): TenantsFile['tenants'][number] => file.tenants[0]!
  t.same(await reload(() => { file.tenants[1]!.keys = [] }), [0, 2], 'another tenant\'s change: both reused')
  t.same(await reload(() => { acme().constants = { site: 'acme.example' } }), [2, 0], 'a constant changed: both checked again')
  t.equal(registry.tenants.get('acme')?.templates.render('en', sample).text, 'Code 123456 for acme.example', 'the new constant is in the mail')
  t.same(await reload(() => { acme().brand = { name: 'Acme Corp' } }), [2, 0], 'the brand changed: both checked again')
  t.same(await reload(() => { acme().ttlSeconds = 420 }), [2, 0], 'the lifetime changed: the test renders differ, both checked again')
  t.same(await reload(() => { acme().templates!.en!.text = 'Your code: {{ code }}' }), [1, 1], 'one source changed: that part alone is checked')

  // A refusal is reused as well, and stays a refusal.
  t.same(await reload(() => { acme().templates!.en!.text = 'No code here' }), [1, 1])
  t.same(registry.refused.get('acme')?.problems, ['/tenants/0/templates/en/text (tenant acme, locale en, text): the template must contain the code, written {{ code }}'])
  t.same(await reload(() => { file.tenants[1]!.keys = [] }), [0, 2])
  t.same(registry.refused.get('acme')?.problems, ['/tenants/0/templates/en/text (tenant acme, locale en, text): the template must contain the code, written {{ code }}'], 'still refused, for the same rule')
})
