//! A lock's two marks in JSON: `{"exclusive": N, "shared": N}`.

use palisade_core::marks::Marks;
use serde::{Deserialize, Serialize};

/// A lock's high-water marks: the highest exclusive and shared
/// generations honoured (core's [`Marks`], as JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Marks))]
pub struct MarksBody {
    /// `H_excl`: the highest exclusive generation honoured.
    pub exclusive: u64,
    /// `H_shared`: the highest shared generation honoured.
    pub shared: u64,
}

impl From<Marks> for MarksBody {
    fn from(marks: Marks) -> Self {
        MarksBody {
            exclusive: marks.exclusive,
            shared: marks.shared,
        }
    }
}

impl From<MarksBody> for Marks {
    fn from(marks: MarksBody) -> Self {
        Marks {
            exclusive: marks.exclusive,
            shared: marks.shared,
        }
    }
}
