import { Type } from '@sinclair/typebox'

const Allowance = Type.Object({
  limit: Type.Integer({ description: 'Dispatches allowed per window.' }),
  used: Type.Integer({ description: 'Dispatches charged in the current window (failed deliveries are not charged).' }),
  remaining: Type.Integer(),
  window: Type.String({ description: 'Window length (`1h`, `1d`, `30d`…) or `month` (calendar month, UTC).' }),
  resetsAt: Type.String({ format: 'date-time', description: 'When the current window ends and the allowance returns.' })
})

export const UsageReply = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({
    tenant: Type.String(),
    tier: Type.String(),
    live: Allowance,
    sandbox: Allowance
  })
}, { $id: 'UsageReply', description: "The tenant's billing tier and its live and sandbox allowance in the current window." })
